package placement_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

// TestConcurrentUse places and explains from several goroutines on one
// snapshot; run with -race.
func TestConcurrentUse(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 800, Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	d := place(t, topo.Snapshot, topo.InferenceRequest(1))
	want := d.Rejections()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 20 {
				if _, err := placement.Place(topo.Snapshot, topo.InferenceRequest(uint64(g*100+k))); err != nil {
					t.Error(err)
					return
				}
			}
			for k, n := range topo.Nodes {
				if k%7 != g {
					continue
				}
				r, ok := d.Rejection(n.Name)
				if ok && r != want[indexOf(want, n.Name)] {
					t.Errorf("%s: %+v concurrently, %+v alone", n.Name, r, want[indexOf(want, n.Name)])
				}
				_ = d.Explain(n.Name)
			}
		})
	}
	wg.Wait()
}

func indexOf(rs []placement.Rejection, name string) int {
	for k, r := range rs {
		if r.Node == name {
			return k
		}
	}
	return -1
}

func TestDecisionJSON(t *testing.T) {
	s := edgeScenario(t)
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, Key: "svc", Replicas: 1,
		Resources: placement.Resources{CPU: 1000},
		Tiers:     []string{placement.TierEdge},
	})
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Kind       string                  `json:"kind"`
		Feasible   bool                    `json:"feasible"`
		Placements []struct{ Node string } `json:"placements"`
		Rejected   map[string]int          `json:"rejected"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Kind != "inference" || !back.Feasible || len(back.Placements) != 1 || back.Rejected["not_alive"] != 1 {
		t.Errorf("JSON round trip lost data: %s", b)
	}
}

func TestEmptySnapshot(t *testing.T) {
	s := build(t)
	d := place(t, s, &placement.Request{Kind: placement.Inference, Tiers: []string{placement.TierEdge, placement.TierCloud}})
	if d.Feasible || len(d.Placements) != 0 || len(d.Fallbacks) != 2 {
		t.Errorf("empty snapshot:\n%s", d)
	}
	if !strings.Contains(d.String(), "NOT feasible") {
		t.Errorf("rendering: %s", d)
	}
	g := place(t, s, gangRequest(2))
	if g.Feasible || len(g.Placements) != 0 {
		t.Errorf("gang on nothing:\n%s", g)
	}
}

package sim_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

func TestParseChange(t *testing.T) {
	t.Parallel()
	good := map[string]sim.Change{
		"site edge-b down":                      {Op: "site-down", Target: "edge-b"},
		"node  gpu-1   down":                    {Op: "node-down", Target: "gpu-1"},
		"add 4 nodes like gpu-1 in rack rack-2": {Op: "add-nodes", Target: "gpu-1", Count: 4, Rack: "rack-2"},
		"add 1 node like a in site s in rack r": {Op: "add-nodes", Target: "a", Count: 1, Rack: "r", Site: "s"},
		"policy fraud-scorer latency.p99=10ms":  {Op: "policy", Target: "fraud-scorer", P99: 10 * time.Millisecond},
		"policy InferenceService/x replicas=3":  {Op: "policy", Target: "InferenceService/x", Replicas: 3},
		"policy x latency.p99=5ms replicas=2":   {Op: "policy", Target: "x", P99: 5 * time.Millisecond, Replicas: 2},
	}
	for in, want := range good {
		got, err := sim.ParseChange(in)
		want.Text = strings.Join(strings.Fields(in), " ")
		if err != nil || got != want {
			t.Errorf("ParseChange(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	var b strings.Builder
	for _, in := range []string{
		"site edge-b",
		"add many nodes like gpu-1",
		"add 2 nodes like gpu-1 on rack r",
		"policy x latency.p99=fast",
		"policy x replicas=0",
		"policy x colour=red",
		"policy x p99",
		"reboot everything",
	} {
		if _, err := sim.ParseChange(in); err == nil {
			t.Errorf("ParseChange(%q): no error", in)
		} else {
			b.WriteString(err.Error() + "\n")
		}
	}
	golden(t, "change_errors.golden", b.String())
}

// TestWhatIf plans one service near an edge site: its site going dark
// moves it, a 1µs SLO makes it infeasible, a change elsewhere leaves it.
func TestWhatIf(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 600, Seed: 4, DeadFraction: -1})
	client := topo.EdgeSites()[0]
	req := &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/scorer", Replicas: 1,
		Resources: placement.Resources{CPU: 500, Memory: 1 << 30},
		Latency:   placement.Latency{P99: 20 * time.Millisecond, Clients: []string{client}},
		Tiers:     []string{placement.TierEdge, placement.TierCloud},
	}
	pols := []sim.PolicyRequest{{Key: req.Key, Request: req, Snapshot: topo.Snapshot}}
	d, err := placement.Place(topo.Snapshot, req)
	if err != nil || !d.Feasible {
		t.Fatalf("place: %v\n%s", err, d)
	}
	at := d.Placements[0]
	other := topo.EdgeSites()[len(topo.EdgeSites())-1]
	for _, c := range []struct {
		change, status, why string
	}{
		{"site " + at.Site + " down", "moves", "leaves " + at.Node},
		{"node " + at.Node + " down", "moves", "leaves " + at.Node},
		{"policy scorer replicas=5000", "becomes infeasible", "cloud: "},
		{"policy scorer latency.p99=1us", "", ""},
		{"site " + other + " down", "unchanged", ""},
		{"add 3 nodes like " + at.Node, "", ""},
	} {
		ch, err := sim.ParseChange(c.change)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sim.WhatIf(topo.Snapshot, pols, []sim.Change{ch})
		if err != nil {
			t.Fatalf("%s: %v", c.change, err)
		}
		if len(rep.Outcomes) != 1 || rep.Policies != 1 {
			t.Fatalf("%s: %+v", c.change, rep)
		}
		o := rep.Outcomes[0]
		if c.status != "" && (o.Status != c.status || !strings.Contains(o.Why, c.why)) {
			t.Errorf("%s: %+v, want %s (%s)", c.change, o, c.status, c.why)
		}
		if o.Status == "moves" && (len(o.After) != 1 || o.After[0] == at.Node) {
			t.Errorf("%s: moved to %v", c.change, o.After)
		}
	}
	// A placed policy stays where it is unless a change takes its node
	// down, even where a plan now would choose another node.
	placedOn := topo.Snapshot.Nodes()[len(topo.Nodes)-1].Name
	placed := []sim.PolicyRequest{{Key: req.Key, Request: req, Snapshot: topo.Snapshot, Placed: []string{placedOn}}}
	for change, status := range map[string]string{"site " + at.Site + " down": "unchanged", "node " + placedOn + " down": "moves"} {
		ch, _ := sim.ParseChange(change)
		rep, err := sim.WhatIf(topo.Snapshot, placed, []sim.Change{ch})
		if err != nil {
			t.Fatal(err)
		}
		if o := rep.Outcomes[0]; o.Status != status || o.Before[0] != placedOn {
			t.Errorf("placed on %s, %s: %+v; want %s", placedOn, change, o, status)
		}
	}
	for _, bad := range []string{"site atlantis down", "node nobody down", "add 1 node like nobody", "policy other latency.p99=1ms"} {
		ch, err := sim.ParseChange(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sim.WhatIf(topo.Snapshot, pols, []sim.Change{ch}); !errors.Is(err, sim.ErrUnknown) {
			t.Errorf("%s: err = %v, want ErrUnknown", bad, err)
		}
	}
}

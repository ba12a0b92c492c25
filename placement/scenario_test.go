package placement_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

const gib = int64(1) << 30

// at is a coordinate x, y milliseconds from the origin on a plane, with no
// height: the predicted RTT between two of them is their distance, which
// keeps hand-built scenarios checkable by hand.
func at(x, y float64) *coordinate.Coordinate {
	return &coordinate.Coordinate{Vec: []float64{x / 1e3, y / 1e3}}
}

// box is an edge or cloud node with cores CPUs and memGiB, all free.
func box(name, tier, site, region string, cores int64, memGiB int64, c *coordinate.Coordinate) placement.Node {
	return placement.Node{
		ID: "id-" + name, Name: name, Tier: tier, Site: site, Region: region,
		CPU: cores * 1000, FreeCPU: cores * 1000, Memory: memGiB * gib, FreeMemory: memGiB * gib,
		Alive: true, Coord: c, Labels: map[string]string{},
	}
}

// hgx is an on-prem node with eight free H100s on a fabric.
func hgx(name, site, fabric, rack string, c *coordinate.Coordinate) placement.Node {
	n := box(name, placement.TierOnprem, site, "west", 128, 2048, c)
	n.Fabric, n.Rack = fabric, rack
	for range 8 {
		n.GPUs = append(n.GPUs, placement.GPU{Model: "NVIDIA H100 80GB HBM3", Memory: 80 * gib, Healthy: true, Free: true})
	}
	return n
}

func build(tb testing.TB, nodes ...placement.Node) *placement.Snapshot {
	tb.Helper()
	var b placement.Builder
	b.Add(nodes...)
	s, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func place(tb testing.TB, s *placement.Snapshot, r *placement.Request) *placement.Decision {
	tb.Helper()
	d, err := placement.Place(s, r)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// explainAll renders the decision and an explanation of every node.
func explainAll(d *placement.Decision, s *placement.Snapshot) string {
	var b strings.Builder
	b.WriteString(d.String())
	b.WriteString("\n")
	for _, n := range s.Nodes() {
		b.WriteString(d.Explain(n.Name))
	}
	return b.String()
}

// edgeScenario: two shops, a data centre and a cloud region on a line.
//
//	x (ms):  0   1        10  12             85    100
//	         a1  a2       n1  n2             c1    b1 b2
//
// Shop edge-a holds a1 and a2; shop edge-b holds b1 (busy: 500m CPU free)
// and b2 (dead). Client coordinates are the medians of their shops: edge-a
// at x=0.5, edge-b at x=100.
func edgeScenario(tb testing.TB) *placement.Snapshot {
	a1 := box("a1", placement.TierEdge, "edge-a", "west", 4, 8, at(0, 0))
	a2 := box("a2", placement.TierEdge, "edge-a", "west", 8, 16, at(1, 0))
	b1 := box("b1", placement.TierEdge, "edge-b", "east", 4, 8, at(100, 0))
	b1.FreeCPU = 500
	b2 := box("b2", placement.TierEdge, "edge-b", "east", 4, 8, at(100, 0))
	b2.Alive = false
	n1 := box("n1", placement.TierOnprem, "dc-1", "west", 64, 256, at(10, 0))
	n2 := box("n2", placement.TierOnprem, "dc-1", "west", 64, 256, at(12, 0))
	n2.FreeMemory = 1 * gib
	c1 := box("c1", placement.TierCloud, "cloud-east", "east", 32, 128, at(85, 0))
	return build(tb, a1, a2, b1, b2, n1, n2, c1)
}

func TestGoldenEdgeFallback(t *testing.T) {
	s := edgeScenario(t)
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/fraud-scorer",
		PerClientSite: true,
		Resources:     placement.Resources{CPU: 1000, Memory: 2 * gib},
		Latency:       placement.Latency{P99: 20e6, Clients: []string{"edge-a", "edge-b"}},
		Tiers:         []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud},
		Seed:          1,
	})
	golden(t, "edge_fallback.golden", explainAll(d, s))
}

func TestGoldenSpreadAndConstraint(t *testing.T) {
	var nodes []placement.Node
	for _, n := range edgeScenario(t).Nodes() {
		if n.Name != "n2" {
			n.Labels["disk"] = "ssd"
		}
		nodes = append(nodes, n)
	}
	s := build(t, nodes...)
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/vision",
		Replicas:    3,
		Resources:   placement.Resources{CPU: 1000, Memory: 2 * gib},
		Latency:     placement.Latency{P99: 15e6, Clients: []string{"west"}},
		Tiers:       []string{placement.TierEdge, placement.TierOnprem},
		Spread:      placement.SpreadSite,
		Constraints: []placement.Constraint{labelIs("disk", "ssd")},
		Seed:        1,
	})
	golden(t, "spread_constraint.golden", explainAll(d, s))
}

// gangScenario: two fabrics in one data centre. ib-1 has three idle HGX
// nodes; ib-2 has two idle ones, one with four GPUs busy, and holds the
// dataset. g0 has GPUs but no fabric.
func gangScenario(tb testing.TB) *placement.Snapshot {
	var nodes []placement.Node
	for _, name := range []string{"f1a", "f1b", "f1c"} {
		nodes = append(nodes, hgx(name, "dc-1", "ib-1", "rack-1", at(10, 0)))
	}
	for _, name := range []string{"f2a", "f2b", "f2c"} {
		nodes = append(nodes, hgx(name, "dc-1", "ib-2", "rack-2", at(10, 1)))
	}
	for j := range 4 {
		nodes[5].GPUs[j].Free = false
	}
	nodes[4].Datasets = []string{"clicks:v3"}
	nodes = append(nodes, hgx("g0", "dc-1", "", "rack-3", at(10, 2)))
	return build(tb, nodes...)
}

func gangRequest(members int) *placement.Request {
	return &placement.Request{
		Kind: placement.Training, Key: "TrainingJob/ranker",
		Resources: placement.Resources{CPU: 16000, Memory: 256 * gib, GPUModel: "H100"},
		Gang:      placement.Gang{Nodes: members, GPUsPerNode: 8, SameFabric: true},
		Data:      []placement.DataRef{{Dataset: "clicks:v3", Bytes: 100 * gib}},
		Tiers:     []string{placement.TierOnprem},
		Seed:      1,
	}
}

func TestGoldenGang(t *testing.T) {
	s := gangScenario(t)
	for _, tc := range []struct {
		name    string
		members int
	}{{"gang_near_data.golden", 2}, {"gang_only_fit.golden", 3}, {"gang_no_fit.golden", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, tc.name, explainAll(place(t, s, gangRequest(tc.members)), s))
		})
	}
}

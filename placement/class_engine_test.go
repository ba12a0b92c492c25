package placement_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

// celConstraints and celAffinities are compiled CEL, some answered per
// node class (they read only class attributes) and some per node (they
// read identity or load).
var (
	celConstraints = []string{
		`node.labels["hw"] != "rugged"`,
		`node.arch == "amd64" && node.tier != "cloud"`,
		`node.gpus.all(g, g.healthy) || size(node.gpus) == 0`,
		`node.free_cpu >= 6000`,
		`!node.name.endsWith("7")`,
		`node.gpus.exists(g, g.free) || size(node.gpus) == 0`,
		`node.cpu >= 8000 || node.site.startsWith("edge")`,
	}
	celAffinities = []string{
		`node.labels["hw"] == "nuc" ? 1.0 : 0.0`,
		`node.tier == "onprem"`,
		`double(node.free_memory) / double(node.memory + 1)`,
		`node.fabric != "" ? 0.5 : 0.0`,
	}
)

// TestClassesMatchExhaustive checks decisions with CEL constraints and
// affinities, answered per node class, against the exhaustive reference
// (every expression on every node), on snapshots from Build and on clones
// with reservations, for inference and gangs, with every node's reason.
func TestClassesMatchExhaustive(t *testing.T) {
	fast, err := placement.New(placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := placement.New(placement.Options{Exhaustive: true})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := sim.Generate(sim.Options{Nodes: 700, Seed: 5, Regions: 4, DeadFraction: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 17))
	snap := topo.Snapshot
	for k := range 80 {
		req := randomRequest(topo, rng, uint64(k))
		req.Constraints, req.Affinities = nil, nil
		for range rng.IntN(3) {
			req.Constraints = append(req.Constraints, compile(t, true, celConstraints[rng.IntN(len(celConstraints))]))
		}
		for range rng.IntN(3) {
			req.Affinities = append(req.Affinities, placement.Affinity{Expr: compile(t, false, celAffinities[rng.IntN(len(celAffinities))]), Weight: float64(1 + rng.IntN(2))})
		}
		t.Run(fmt.Sprintf("req%d-%s", k, req.Kind), func(t *testing.T) {
			a, err := fast.Place(snap, req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := slow.Place(snap, req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(b, a, cmpDecision); diff != "" {
				t.Fatalf("class-cached decision differs from exhaustive (-exhaustive +classes):\n%s", diff)
			}
			for _, n := range topo.Nodes {
				ra, oka := a.Rejection(n.ID)
				rb, okb := b.Rejection(n.ID)
				if oka != okb || ra != rb {
					t.Fatalf("node %s: classes %v %+v, exhaustive %v %+v", n.Name, oka, ra, okb, rb)
				}
			}
			// Place the next request around this one: clones carry
			// reservations the class answers must not hide.
			if a.Feasible && k%2 == 0 {
				next, err := a.Apply()
				if err != nil {
					t.Fatal(err)
				}
				snap = next
			}
		})
	}
}

// TestMaxCandidates checks that a bound on scored candidates still gives
// complete, consistent decisions, that no bound gives the decisions of the
// unbounded engine, and that the bound shows in the metrics.
func TestMaxCandidates(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 2000, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	full, err := placement.New(placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bounded, err := placement.New(placement.Options{MaxCandidates: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := placement.New(placement.Options{MaxCandidates: -1}); err == nil {
		t.Error("MaxCandidates -1: no error")
	}
	for k := range 40 {
		req := topo.InferenceRequest(uint64(k))
		req.Tiers, req.Latency.P99 = nil, 0
		a := place(t, topo.Snapshot, req)
		b, err := bounded.Place(topo.Snapshot, req)
		if err != nil {
			t.Fatal(err)
		}
		c, err := full.Place(topo.Snapshot, req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(exported(a), exported(c)); diff != "" {
			t.Fatalf("req %d: Place and New(Options{}) differ:\n%s", k, diff)
		}
		if !b.Feasible || len(b.Placements) != len(a.Placements) {
			t.Fatalf("req %d: bounded decision placed %d of %d:\n%s", k, len(b.Placements), len(a.Placements), b)
		}
		sum := len(b.Placements)
		for _, n := range b.Rejected {
			sum += n
		}
		if sum != b.Nodes {
			t.Errorf("req %d: placements + rejected = %d, want %d", k, sum, b.Nodes)
		}
		if b.Metrics.Feasible > 8 && b.Metrics.Scored > 8*len(req.Latency.Clients) && req.Spread == placement.SpreadNone {
			t.Errorf("req %d: scored %d of %d feasible, want at most 8", k, b.Metrics.Scored, b.Metrics.Feasible)
		}
		if a.Metrics.Scored != a.Metrics.Feasible {
			t.Errorf("req %d: unbounded scored %d of %d feasible", k, a.Metrics.Scored, a.Metrics.Feasible)
		}
		for _, p := range b.Placements {
			if p.Total > a.Placements[0].Total+1e-9 {
				t.Errorf("req %d: bounded chose %s scoring %.3f above the unbounded best %.3f", k, p.Node, p.Total, a.Placements[0].Total)
			}
		}
	}
}

// TestMetrics checks the per-decision diagnostics.
func TestMetrics(t *testing.T) {
	s := uniformSnapshot(t, 500)
	req := &placement.Request{
		Kind: placement.Inference, Key: "m", Replicas: 3,
		Resources:   placement.Resources{CPU: 1000, Memory: 2 * gib},
		Constraints: []placement.Constraint{compile(t, true, `node.labels["rack"] != "r03"`)},
		Affinities:  []placement.Affinity{{Expr: compile(t, false, `node.site == "dc1" ? 1 : 0`), Weight: 1}},
	}
	d := place(t, s, req)
	m := d.Metrics
	if m.NodesEvaluated != 500 || m.Classes != 25 {
		t.Errorf("evaluated %d nodes in %d classes, want 500 in 25", m.NodesEvaluated, m.Classes)
	}
	if got := m.Filtered[placement.ReasonConstraint]; got != 20 {
		t.Errorf("filtered by constraint: %d, want 20 (rack r03)", got)
	}
	if m.Feasible != 480 || m.Scored != 480 {
		t.Errorf("feasible %d, scored %d, want 480 and 480", m.Feasible, m.Scored)
	}
	// One evaluation per rack for the constraint, one per datacenter for
	// the affinity.
	if m.ClassEvals != 25+2 {
		t.Errorf("class evaluations: %d, want 27", m.ClassEvals)
	}
	if m.Duration <= 0 {
		t.Error("no duration")
	}
}

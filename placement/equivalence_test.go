package placement_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/sim"
)

// randomRequest draws a request that exercises every stage: tiers in
// any order or none, per-client-site groups, spread, exclusions, GPUs,
// constraints, affinities and data.
func randomRequest(topo *sim.Topology, rng *rand.Rand, seed uint64) *placement.Request {
	edge := topo.EdgeSites()
	if rng.IntN(3) == 0 {
		n := 1 + rng.IntN(4)
		r := topo.TrainingRequest(seed, n, 1+rng.IntN(8))
		r.Gang.SameFabric = rng.IntN(4) != 0
		if rng.IntN(3) == 0 {
			r.Tiers = nil
		}
		if rng.IntN(3) == 0 {
			r.Resources.GPUModel = ""
		}
		if rng.IntN(4) == 0 {
			r.Constraints = []placement.Constraint{labelIs("hw", "hgx")}
		}
		return r
	}
	r := topo.InferenceRequest(seed)
	switch rng.IntN(4) {
	case 0:
		r.Tiers = nil
	case 1:
		r.Tiers = []string{placement.TierCloud, placement.TierEdge}
	}
	r.Spread = []placement.Spread{placement.SpreadNone, placement.SpreadSite, placement.SpreadRegion}[rng.IntN(3)]
	if rng.IntN(3) == 0 {
		r.PerClientSite = true
		r.Latency.Clients = []string{edge[rng.IntN(len(edge))], edge[rng.IntN(len(edge))], topo.Regions[rng.IntN(len(topo.Regions))]}
		if r.Latency.Clients[0] == r.Latency.Clients[1] {
			r.Latency.Clients = r.Latency.Clients[1:]
		}
	}
	r.Latency.P99 = []time.Duration{0, 2 * time.Millisecond, 8 * time.Millisecond, 20 * time.Millisecond}[rng.IntN(4)]
	if r.Latency.P99 == 0 && rng.IntN(2) == 0 {
		r.Latency.Clients = nil
		r.PerClientSite = false
	}
	if rng.IntN(3) == 0 {
		r.Resources.GPUs = 1
		if rng.IntN(2) == 0 {
			r.Resources.GPUModel = "L4"
		}
	}
	if rng.IntN(4) == 0 {
		r.Constraints = []placement.Constraint{labelIs("hw", "rugged")}
	}
	if rng.IntN(4) == 0 {
		r.Affinities = []placement.Affinity{{Weight: 1, Expr: classScore{fields: []string{"arch"}, scoreFunc: scoreFunc{expr: `node.arch == "arm64" ? 1 : 0`, f: func(n *policy.Node) (float64, error) {
			if n.Arch == "arm64" {
				return 1, nil
			}
			return 0, nil
		}}}}}
	}
	if rng.IntN(3) == 0 {
		r.Resources.CPU = int64(rng.IntN(16)) * 1000
	}
	for range rng.IntN(4) {
		n := topo.Nodes[rng.IntN(len(topo.Nodes))]
		if rng.IntN(2) == 0 {
			r.Exclude = append(r.Exclude, n.ID)
		} else {
			r.Exclude = append(r.Exclude, n.Name)
		}
	}
	return r
}

// TestIndexMatchesExhaustive checks the indexed engine against the
// exhaustive reference on random topologies and requests: the same
// placements, fallbacks and counts, and for every node the same reason.
// This is what makes the region and site pruning safe.
func TestIndexMatchesExhaustive(t *testing.T) {
	fast, err := placement.New(placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := placement.New(placement.Options{Exhaustive: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, topoSeed := range []uint64{1, 2, 3} {
		opts := sim.Options{Nodes: 600, Seed: topoSeed, Regions: 3 + int(topoSeed), DeadFraction: 0.03}
		if topoSeed == 3 {
			opts.Vivaldi, opts.VivaldiRounds = true, 60
		}
		topo, err := sim.Generate(opts)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(topoSeed, 99))
		for k := range 60 {
			req := randomRequest(topo, rng, uint64(k))
			name := fmt.Sprintf("topo%d/req%d-%s", topoSeed, k, req.Kind)
			t.Run(name, func(t *testing.T) {
				a, err := fast.Place(topo.Snapshot, req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := slow.Place(topo.Snapshot, req)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(b, a, cmp.AllowUnexported(), cmpDecision); diff != "" {
					t.Fatalf("indexed decision differs from exhaustive (-exhaustive +indexed):\n%s", diff)
				}
				sum := len(a.Placements)
				for _, n := range a.Rejected {
					sum += n
				}
				if sum != a.Nodes {
					t.Errorf("placements + rejected = %d, want %d nodes", sum, a.Nodes)
				}
				for _, n := range topo.Nodes {
					ra, oka := a.Rejection(n.ID)
					rb, okb := b.Rejection(n.ID)
					if oka != okb || ra != rb {
						t.Fatalf("node %s: indexed %v %+v, exhaustive %v %+v", n.Name, oka, ra, okb, rb)
					}
				}
			})
		}
	}
}

// cmpDecision compares the exported parts of decisions.
var cmpDecision = cmp.Comparer(func(x, y *placement.Decision) bool {
	return cmp.Equal(exported(x), exported(y))
})

type decisionView struct {
	Kind       placement.Kind
	Feasible   bool
	Wanted     int
	Tiers      []string
	Placements []placement.Placement
	Domain     *placement.Domain
	Fallbacks  []placement.Fallback
	Nodes      int
	Rejected   map[placement.Reason]int
}

func exported(d *placement.Decision) decisionView {
	return decisionView{d.Kind, d.Feasible, d.Wanted, d.Tiers, d.Placements, d.Domain, d.Fallbacks, d.Nodes, d.Rejected}
}

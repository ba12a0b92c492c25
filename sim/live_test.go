package sim_test

import (
	"slices"
	"testing"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

// TestFromNodesReplays makes a topology of a generated estate's nodes as
// a live mesh would give them (no ground truth), and replays a trace over
// it: the sites are the estate's, edge first; RTT is the coordinates'
// estimate; every strategy runs, and strata still meets the SLO for more
// client sites than random. A node without a coordinate is out of reach,
// not a crash.
func TestFromNodesReplays(t *testing.T) {
	t.Parallel()
	gen := generate(t, sim.Options{Nodes: 1500, Seed: 4})
	nodes := gen.Snapshot.Nodes()
	nodes[0].Coord = nil
	topo, err := sim.FromNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Sites) != len(gen.Sites) || !slices.Equal(topo.EdgeSites(), sortedCopy(gen.EdgeSites())) {
		t.Fatalf("sites: %d, edge %v; want %d, edge %v", len(topo.Sites), topo.EdgeSites(), len(gen.Sites), gen.EdgeSites())
	}
	for k := 1; k < len(topo.Sites); k++ {
		if tierRank(topo.Sites[k].Tier) < tierRank(topo.Sites[k-1].Tier) {
			t.Fatalf("site %s (%s) after %s (%s): want edge, on-prem, cloud", topo.Sites[k].Name, topo.Sites[k].Tier, topo.Sites[k-1].Name, topo.Sites[k-1].Tier)
		}
	}
	if got, want := topo.TrueRTT(1, 2), topo.Nodes[1].Coord.DistanceTo(topo.Nodes[2].Coord); got != want {
		t.Errorf("RTT %v, want the coordinates' estimate %v", got, want)
	}
	if d := topo.TrueRTT(0, 2); d < 1<<62 {
		t.Errorf("RTT to a node without a coordinate %v, want out of reach", d)
	}
	evs := gen.Trace(sim.TraceOptions{Policies: 200, Seed: 4})
	rep, err := sim.Run(topo, evs, sim.RunOptions{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]sim.Result{}
	for _, r := range rep.Results {
		if r.Decisions == 0 || r.ClientPairs == 0 {
			t.Errorf("%s: nothing replayed: %+v", r.Strategy, r)
		}
		by[r.Strategy] = r
	}
	if st, rnd := by[sim.StrategyStrata], by[sim.StrategyRandom]; st.SLOAttainment <= rnd.SLOAttainment {
		t.Errorf("strata (%.3f) is no better than random (%.3f) at the SLO", st.SLOAttainment, rnd.SLOAttainment)
	}
	if !rep.EstimatedRTT {
		t.Error("report does not say RTT was estimated")
	}
	if _, err := sim.FromNodes(nil); err == nil {
		t.Error("no nodes: want an error")
	}
}

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

func tierRank(tier string) int {
	return map[string]int{placement.TierEdge: 0, placement.TierOnprem: 1, placement.TierCloud: 2}[tier]
}

package sim_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

func generate(tb testing.TB, o sim.Options) *sim.Topology {
	tb.Helper()
	t, err := sim.Generate(o)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func TestDeterministic(t *testing.T) {
	a := generate(t, sim.Options{Nodes: 500, Seed: 3})
	b := generate(t, sim.Options{Nodes: 500, Seed: 3})
	if diff := cmp.Diff(a.Nodes, b.Nodes); diff != "" {
		t.Fatalf("same seed, different nodes (-a +b):\n%s", diff)
	}
	c := generate(t, sim.Options{Nodes: 500, Seed: 4})
	if cmp.Equal(a.Nodes, c.Nodes) {
		t.Error("different seeds gave the same topology")
	}
	va := generate(t, sim.Options{Nodes: 60, Seed: 3, Vivaldi: true, VivaldiRounds: 50})
	vb := generate(t, sim.Options{Nodes: 60, Seed: 3, Vivaldi: true, VivaldiRounds: 50})
	if diff := cmp.Diff(va.Nodes, vb.Nodes); diff != "" {
		t.Fatalf("Vivaldi mode is not reproducible (-a +b):\n%s", diff)
	}
}

func TestShape(t *testing.T) {
	topo := generate(t, sim.Options{Nodes: 5000, Seed: 1})
	if got := len(topo.Nodes); got != 5000 {
		t.Fatalf("%d nodes", got)
	}
	tiers := map[string]int{}
	dead := 0
	ids := map[string]bool{}
	for _, n := range topo.Nodes {
		tiers[n.Tier]++
		if !n.Alive {
			dead++
		}
		if ids[n.ID] {
			t.Fatalf("duplicate id %s", n.ID)
		}
		ids[n.ID] = true
		switch n.Tier {
		case placement.TierEdge:
			if len(n.GPUs) > 1 || n.Fabric != "" || n.CPU > 16000 {
				t.Fatalf("edge node %s: %d GPUs, fabric %q, %d CPU", n.Name, len(n.GPUs), n.Fabric, n.CPU)
			}
		case placement.TierOnprem:
			if len(n.GPUs) != 8 || n.Fabric == "" || n.Rack == "" {
				t.Fatalf("on-prem node %s: %d GPUs, fabric %q, rack %q", n.Name, len(n.GPUs), n.Fabric, n.Rack)
			}
		}
		if n.FreeCPU > n.CPU || n.FreeMemory > n.Memory || n.FreeCPU < 0 || n.FreeMemory < 0 {
			t.Fatalf("%s: free exceeds total or is negative", n.Name)
		}
	}
	if diff := cmp.Diff(map[string]int{"edge": 3500, "onprem": 1000, "cloud": 500}, tiers); diff != "" {
		t.Errorf("tiers (-want +got):\n%s", diff)
	}
	if dead < 20 || dead > 90 {
		t.Errorf("%d dead of 5000, want about 1%%", dead)
	}
	// Fabrics hold at most 32 on-prem nodes (a pod of two racks).
	perFabric := map[string]int{}
	for _, n := range topo.Nodes {
		if n.Tier == placement.TierOnprem {
			perFabric[n.Fabric]++
		}
	}
	for f, k := range perFabric {
		if k > 32 {
			t.Errorf("fabric %s has %d nodes", f, k)
		}
	}
	if len(topo.Datasets) == 0 {
		t.Error("no datasets held")
	}
	if topo.Snapshot.Len() != 5000 {
		t.Errorf("snapshot has %d nodes", topo.Snapshot.Len())
	}
}

// TestLatencyModel checks the ground truth against the ranges the package
// promises.
func TestLatencyModel(t *testing.T) {
	topo := generate(t, sim.Options{Nodes: 3000, Seed: 2})
	site := map[string]int{}
	for i, n := range topo.Nodes {
		site[n.Name] = i
	}
	var intraSite, intraRegion, crossRegion []time.Duration
	rng := rand.New(rand.NewPCG(2, 2))
	for range 20000 {
		a, b := rng.IntN(len(topo.Nodes)), rng.IntN(len(topo.Nodes))
		if a == b {
			continue
		}
		na, nb := topo.Nodes[a], topo.Nodes[b]
		rtt := topo.TrueRTT(a, b)
		if rtt != topo.TrueRTT(b, a) {
			t.Fatal("ground truth is not symmetric")
		}
		switch {
		case na.Site == nb.Site:
			intraSite = append(intraSite, rtt)
		case na.Region == nb.Region:
			intraRegion = append(intraRegion, rtt)
		default:
			crossRegion = append(crossRegion, rtt)
		}
	}
	for _, tc := range []struct {
		name     string
		samples  []time.Duration
		min, max time.Duration
	}{
		{"intra-site", intraSite, 100 * time.Microsecond, 2500 * time.Microsecond},
		{"intra-region", intraRegion, 100 * time.Microsecond, 13 * time.Millisecond},
		{"cross-region", crossRegion, 10 * time.Millisecond, 190 * time.Millisecond},
	} {
		if len(tc.samples) < 10 {
			t.Errorf("%s: only %d samples", tc.name, len(tc.samples))
			continue
		}
		if lo, hi := slices.Min(tc.samples), slices.Max(tc.samples); lo < tc.min || hi > tc.max {
			t.Errorf("%s RTT in [%v, %v], want within [%v, %v]", tc.name, lo, hi, tc.min, tc.max)
		}
	}
}

// predictionError returns the median relative error of the RTT predicted
// by coordinates against the ground truth over a sample of pairs, and the
// share of pairs off by more than max(10% of the true RTT, 1 ms).
func predictionError(topo *sim.Topology, pairs int) (p50 float64, bad float64) {
	rng := rand.New(rand.NewPCG(9, 9))
	var rel []float64
	miss := 0
	for range pairs {
		a, b := rng.IntN(len(topo.Nodes)), rng.IntN(len(topo.Nodes))
		if a == b {
			continue
		}
		truth := topo.TrueRTT(a, b)
		d := topo.Nodes[a].Coord.DistanceTo(topo.Nodes[b].Coord) - truth
		if d < 0 {
			d = -d
		}
		rel = append(rel, float64(d)/float64(truth))
		if d > max(truth/10, time.Millisecond) {
			miss++
		}
	}
	slices.Sort(rel)
	return rel[len(rel)/2], float64(miss) / float64(len(rel))
}

func TestCoordinateError(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		// The plane part is exact; only the ±5% pair noise remains.
		topo := generate(t, sim.Options{Nodes: 2000, Seed: 4})
		p50, bad := predictionError(topo, 20000)
		t.Logf("relative RTT error p50 %.3f; %.2f%% of pairs off by more than max(10%%, 1ms)", p50, 100*bad)
		if p50 > 0.03 || bad > 0 {
			t.Errorf("p50 %.3f, %.4f off; want ≤ 0.03 and none", p50, bad)
		}
	})
	t.Run("vivaldi", func(t *testing.T) {
		topo := generate(t, sim.Options{Nodes: 300, Seed: 4, Regions: 4, Vivaldi: true})
		p50, bad := predictionError(topo, 20000)
		t.Logf("relative RTT error p50 %.3f; %.2f%% of pairs off by more than max(10%%, 1ms)", p50, 100*bad)
		// Vivaldi is good on long paths and loose on short ones (a 1 ms
		// pair off by 0.5 ms is 50%), hence the 1 ms floor.
		if p50 > 0.10 || bad > 0.10 {
			t.Errorf("p50 %.3f, %.3f off; want ≤ 0.10 and ≤ 0.10", p50, bad)
		}
	})
}

func TestRequests(t *testing.T) {
	topo := generate(t, sim.Options{Nodes: 2000, Seed: 6})
	for k := range uint64(20) {
		for _, r := range []*placement.Request{topo.InferenceRequest(k), topo.TrainingRequest(k, 4, 8)} {
			if err := r.Validate(); err != nil {
				t.Fatalf("request %d: %v", k, err)
			}
			if _, err := placement.Place(topo.Snapshot, r); err != nil {
				t.Fatalf("request %d: %v", k, err)
			}
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []sim.Options{{Nodes: -1}, {EdgeFraction: 0.9, OnpremFraction: 0.5}, {Noise: 1}} {
		if _, err := sim.Generate(o); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}

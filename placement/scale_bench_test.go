package placement_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

var (
	uniformMu    sync.Mutex
	uniformCache = map[int]*placement.Snapshot{}
)

// uniformSnapshot is n identical on-prem nodes (32 cores, 128 GiB) in two
// datacenters of 25 racks in all, each with a seeded share of its CPU and
// memory already in use. Racks are both the Rack field and a label.
func uniformSnapshot(tb testing.TB, n int) *placement.Snapshot {
	tb.Helper()
	uniformMu.Lock()
	defer uniformMu.Unlock()
	if s, ok := uniformCache[n]; ok {
		return s
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	var b placement.Builder
	for k := range n {
		rack := k % 25
		dc := 1 + rack%2
		used := rng.Int64N(24)
		b.Add(placement.Node{
			ID: fmt.Sprintf("id-u%06d", k), Name: fmt.Sprintf("u%06d", k),
			Tier: placement.TierOnprem, Site: fmt.Sprintf("dc%d", dc), Region: fmt.Sprintf("dc%d", dc),
			Rack: fmt.Sprintf("r%02d", rack), Labels: map[string]string{"rack": fmt.Sprintf("r%02d", rack)},
			Arch: "amd64", CPU: 32000, FreeCPU: 32000 - used*1000, Memory: 128 * gib, FreeMemory: (128 - 4*used) * gib,
			Alive: true, Coord: &coordinate.Coordinate{Vec: []float64{float64(dc) * 0.01, float64(rack) * 1e-4}},
		})
	}
	s, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	uniformCache[n] = s
	return s
}

func compile(tb testing.TB, constraint bool, src string) *policy.Expr {
	tb.Helper()
	var x *policy.Expr
	var err error
	if constraint {
		x, err = policy.CompileConstraint(src)
	} else {
		x, err = policy.CompileAffinity(src)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return x
}

type impl struct {
	name string
	e    *placement.Engine
	reps int
}

// impls are the three engines side by side: today's (strata), the one
// before node classes and top-C selection (previous) and the exhaustive
// reference (naive).
func impls(tb testing.TB, reps, previousReps, naiveReps int) []impl {
	tb.Helper()
	e, err := placement.New(placement.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := placement.NewPrevious(placement.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	n, err := placement.New(placement.Options{Exhaustive: true})
	if err != nil {
		tb.Fatal(err)
	}
	return []impl{{"strata", e, reps}, {"previous", p, previousReps}, {"naive", n, naiveReps}}
}

// BenchmarkUniform places on uniform nodes (25 racks, two datacenters),
// where node classes and top-C selection matter most: one replica with a
// CEL constraint every node passes at 10k and 100k nodes, and 100
// replicas with a CEL affinity at 10k. Every feasible node is scored.
func BenchmarkUniform(b *testing.B) {
	cons := compile(b, true, `node.tier == "onprem" && node.arch == "amd64"`)
	aff := compile(b, false, `node.labels["rack"] == "r07" ? 1.0 : 0.0`)
	for _, tc := range []struct {
		name                   string
		nodes, replicas        int
		affinity               bool
		reps, prevReps, naiveN int
	}{
		{"nodes=10000/replicas=1/constraint", 10000, 1, false, 400, 40, 10},
		{"nodes=100000/replicas=1/constraint", 100000, 1, false, 60, 6, 3},
		{"nodes=10000/replicas=100/affinity", 10000, 100, true, 200, 20, 10},
	} {
		s := uniformSnapshot(b, tc.nodes)
		reqs := make([]*placement.Request, 16)
		for k := range reqs {
			reqs[k] = &placement.Request{
				Kind: placement.Inference, Key: fmt.Sprintf("svc-%d", k), Replicas: tc.replicas,
				Resources:   placement.Resources{CPU: 1000, Memory: 2 * gib},
				Constraints: []placement.Constraint{cons},
				Seed:        uint64(k),
			}
			if tc.affinity {
				reqs[k].Constraints = nil
				reqs[k].Affinities = []placement.Affinity{{Expr: aff, Weight: 1}}
			}
		}
		for _, im := range impls(b, tc.reps, tc.prevReps, tc.naiveN) {
			b.Run(tc.name+"/impl="+im.name, func(b *testing.B) {
				measure(b, im.reps, func(k int) {
					d, err := im.e.Place(s, reqs[k%len(reqs)])
					if err != nil {
						b.Fatal(err)
					}
					if !d.Feasible {
						b.Fatalf("not feasible:\n%s", d)
					}
				})
			})
		}
	}
}

// BenchmarkMaxCandidates measures what Options.MaxCandidates trades: the
// sim workload of BenchmarkPlace at 10k nodes (latency, headroom and data
// scored), every feasible node scored (strata) against a bound. score-loss
// is the mean shortfall of the chosen replicas' mean score against the
// unbounded decision's, in percent; same is the share of decisions that
// chose the same nodes.
func BenchmarkMaxCandidates(b *testing.B) {
	topo := benchTopology(b, 10000)
	reqs := make([]*placement.Request, 200)
	for k := range reqs {
		reqs[k] = topo.InferenceRequest(uint64(k))
		reqs[k].Tiers = nil // all tiers at once: thousands of feasible nodes
		reqs[k].Latency.P99 = 0
	}
	full, err := placement.New(placement.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ref := make([]*placement.Decision, len(reqs))
	for k, r := range reqs {
		if ref[k], err = full.Place(topo.Snapshot, r); err != nil {
			b.Fatal(err)
		}
	}
	for _, limit := range []int{0, 256, 64, 16} {
		name := "strata"
		if limit > 0 {
			name = fmt.Sprintf("max%d", limit)
		}
		e, err := placement.New(placement.Options{MaxCandidates: limit})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("nodes=10000/impl="+name, func(b *testing.B) {
			loss, same, scored := 0.0, 0, 0
			measure(b, len(reqs), func(k int) {
				d, err := e.Place(topo.Snapshot, reqs[k])
				if err != nil {
					b.Fatal(err)
				}
				want, got := meanTotal(ref[k]), meanTotal(d)
				if want > 0 {
					loss += (want - got) / want
				}
				if sameNodes(ref[k], d) {
					same++
				}
				scored += d.Metrics.Scored
			})
			b.ReportMetric(100*loss/float64(len(reqs)), "score-loss-%")
			b.ReportMetric(100*float64(same)/float64(len(reqs)), "same-%")
			b.ReportMetric(float64(scored)/float64(len(reqs)), "scored/op")
		})
	}
}

func meanTotal(d *placement.Decision) float64 {
	if len(d.Placements) == 0 {
		return 0
	}
	t := 0.0
	for _, p := range d.Placements {
		t += p.Total
	}
	return t / float64(len(d.Placements))
}

func sameNodes(a, b *placement.Decision) bool {
	if len(a.Placements) != len(b.Placements) {
		return false
	}
	for k := range a.Placements {
		if a.Placements[k].Node != b.Placements[k].Node {
			return false
		}
	}
	return true
}

// BenchmarkLiveSnapshot is what the controller pays for its view of the
// mesh each time it places: Live.Update with a few nodes' load changed
// (impl=strata) beside building the snapshot afresh from the same nodes
// (impl=rebuild), at 10k and 100k uniform nodes.
func BenchmarkLiveSnapshot(b *testing.B) {
	for _, tc := range []struct{ nodes, changed, reps, rebuildReps int }{
		{10000, 10, 200, 20},
		{100000, 10, 40, 4},
	} {
		nodes := uniformSnapshot(b, tc.nodes).Nodes()
		// Each step changes the load of tc.changed nodes: work starts on
		// them, and ends in the next step.
		step := func(k int) {
			for j := range tc.changed {
				n := &nodes[((k/2)*tc.changed+j)*7919%len(nodes)]
				if k%2 == 0 {
					n.FreeCPU -= 1000
				} else {
					n.FreeCPU += 1000
				}
			}
		}
		name := fmt.Sprintf("nodes=%d/changed=%d", tc.nodes, tc.changed)
		b.Run(name+"/impl=strata", func(b *testing.B) {
			var live placement.Live
			if _, err := live.Update(nodes); err != nil {
				b.Fatal(err)
			}
			measure(b, tc.reps, func(k int) {
				step(k)
				if _, err := live.Update(nodes); err != nil {
					b.Fatal(err)
				}
			})
			if st := live.Stats(); st.Builds != 1 {
				b.Fatalf("built the index %d times (%s)", st.Builds, st.Reason)
			}
		})
		b.Run(name+"/impl=rebuild", func(b *testing.B) {
			measure(b, tc.rebuildReps, func(k int) {
				step(k)
				var bl placement.Builder
				bl.Add(nodes...)
				if _, err := bl.Build(); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

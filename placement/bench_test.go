package placement_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

var (
	topoMu    sync.Mutex
	topoCache = map[int]*sim.Topology{}
)

// benchTopology returns the seeded benchmark topology of n nodes, built
// once per process.
func benchTopology(tb testing.TB, n int) *sim.Topology {
	tb.Helper()
	topoMu.Lock()
	defer topoMu.Unlock()
	if t, ok := topoCache[n]; ok {
		return t
	}
	t, err := sim.Generate(sim.Options{Nodes: n, Seed: 42})
	if err != nil {
		tb.Fatal(err)
	}
	topoCache[n] = t
	return t
}

// measure runs place reps times and reports decisions/s and the p50 and
// p99 latency of one decision, in wall-clock time and in the CPU time of
// the benchmark's thread (which leaves out time the thread was preempted:
// on a loaded machine the wall-clock p99 measures the scheduler). -benchtime
// 1x runs the body once, so the repetitions are ours.
func measure(b *testing.B, reps int, place func(k int)) {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, reps)
	cpu := make([]int64, 0, reps)
	b.ResetTimer()
	for range b.N {
		lat, cpu = lat[:0], cpu[:0]
		start := time.Now()
		for k := range reps {
			c0 := threadCPU()
			t0 := time.Now()
			place(k)
			lat = append(lat, time.Since(t0))
			cpu = append(cpu, threadCPU()-c0)
		}
		elapsed := time.Since(start)
		slices.Sort(lat)
		slices.Sort(cpu)
		b.ReportMetric(float64(reps)/elapsed.Seconds(), "ops/s")
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
		b.ReportMetric(float64(cpu[len(cpu)/2])/1e3, "p50-cpu-us")
		b.ReportMetric(float64(cpu[len(cpu)*99/100])/1e3, "p99-cpu-us")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPlace is inference placement on sim topologies: requests for
// 1–4 replicas within p99 20 ms of one or two edge sites, tiers edge →
// onprem → cloud, spread by site, with data gravity. Every feasible node
// is scored. impl=naive is the exhaustive reference: no index, every node
// through every filter, every feasible node scored and sorted.
func BenchmarkPlace(b *testing.B) {
	for _, tc := range []struct{ nodes, reps, naiveReps int }{
		{1000, 2000, 500},
		{10000, 2000, 100},
		{100000, 200, 20},
	} {
		topo := benchTopology(b, tc.nodes)
		reqs := make([]*placement.Request, 64)
		for k := range reqs {
			reqs[k] = topo.InferenceRequest(uint64(k))
		}
		for _, impl := range impls(b, tc.reps, tc.reps, tc.naiveReps) {
			e := impl.e
			b.Run(fmt.Sprintf("nodes=%d/impl=%s", tc.nodes, impl.name), func(b *testing.B) {
				measure(b, impl.reps, func(k int) {
					if _, err := e.Place(topo.Snapshot, reqs[k%len(reqs)]); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkGang is a training gang of 8 nodes × 8 H100s on one fabric,
// near its dataset, among 10k nodes.
func BenchmarkGang(b *testing.B) {
	topo := benchTopology(b, 10000)
	reqs := make([]*placement.Request, 16)
	for k := range reqs {
		reqs[k] = topo.TrainingRequest(uint64(k), 8, 8)
	}
	for _, impl := range impls(b, 500, 500, 100) {
		e := impl.e
		b.Run("nodes=10000/gang=8x8/impl="+impl.name, func(b *testing.B) {
			measure(b, impl.reps, func(k int) {
				d, err := e.Place(topo.Snapshot, reqs[k%len(reqs)])
				if err != nil {
					b.Fatal(err)
				}
				if !d.Feasible {
					b.Fatalf("gang did not fit:\n%s", d)
				}
			})
		})
	}
}

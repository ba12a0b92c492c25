package agent

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// BenchmarkManyPolicies applies STRATA_BENCH_POLICIES (default 2000; the
// steadiness target is 10000) small inference services through one agent
// of a 7-agent dev mesh, 8 requests at a time, and waits until every agent
// sees each one placed, then until every agent keeps its settled
// policies and placements in its store alone (two minutes after they
// came: mesh.Config.Spill). It reports applies per second and their p99, the
// controller's slowest reconcile pass (p99 over every agent's passes, from
// strata_controller_pass_seconds) and the largest such p99 of any step
// (admit, rollouts and experiments too), Go heap and the process's
// resident set per policy per agent (the median and the most of the
// readings of each second the agents are idle; with the live heap after
// a collection, and the part of the resident set outside what the Go
// runtime holds), the
// most live heap the agents held
// at any time (sampled, per policy per agent: the peak comes while the
// policies are placed, and sets how far the heap grows), the catalog's
// own bytes per policy (what every agent holds of it, as encoded), the
// CPU an agent takes once every policy is placed and nothing changes (the
// median of 5 windows of 6 s), how often a member was seen failed (target
// 0), and how long GET /v1/placements takes at the end (the agent keeps
// few records decoded by then: catalog.Table's aging) and once more.
// STRATA_BENCH_HEAP_PROFILE=FILE writes the heap the agents hold once
// every policy is placed, STRATA_BENCH_IDLE_HEAP_PROFILE=FILE the heap as
// the idle windows begin (go tool pprof -sample_index=alloc_space -base
// it, with the other, shows what the idle agents allocate),
// STRATA_BENCH_IDLE_PROFILE=FILE a CPU profile of the idle windows,
// STRATA_BENCH_PEAK_PROFILE=FILE the heap at the peak,
// STRATA_BENCH_RSS_TRACE=FILE a line each second of the idle windows:
// the resident set and what the runtime says it holds (MB).
// STRATA_BENCH_SECONDS bounds the wait until every
// policy is placed (default 150 ms a policy), after which it says what
// is not placed, where.
func BenchmarkManyPolicies(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_POLICIES")); err == nil && v > 0 {
		n = v
	}
	bound := time.Duration(n) * 150 * time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_SECONDS")); err == nil && v > 0 {
		bound = time.Duration(v) * time.Second
	}
	b.Run("impl=strata", func(b *testing.B) {
		for range b.N {
			// The agent's own failure detection, not the tests' fast one.
			agents := devMesh(b, 7, func(c *Config) { c.MeshTimings = nil })
			h := agents[0].Handler()
			var failedSeen atomic.Int64
			stop := make(chan struct{})
			var watch sync.WaitGroup
			stopWatch := sync.OnceFunc(func() { close(stop); watch.Wait() })
			b.Cleanup(stopWatch) // before the agents stop, also when the benchmark fails
			watch.Go(func() {
				t := time.NewTicker(200 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					for _, a := range agents {
						for _, m := range a.Mesh().Members() {
							if m.Status == mesh.StatusFailed {
								failedSeen.Add(1)
							}
						}
					}
				}
			})
			heapBefore, rssBefore := heapInUse(), processRSS()
			liveBefore, outsideBefore := liveHeap(), rssBefore-goMapped()
			stopPeak := watchPeak(b)
			lat := make([]time.Duration, n)
			var next atomic.Int64
			var errs atomic.Int64
			start := time.Now()
			var workers sync.WaitGroup
			for range 8 {
				workers.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= n {
							return
						}
						src := fmt.Sprintf("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc-%d}\nspec:\n  model: {name: m, version: \"1\"}\n  replicas: 1\n  resources: {cpu: 1m, memory: 1Mi}\n", i)
						t0 := time.Now()
						if code, body := post(b, h, http.MethodPost, "/v1/policies", []byte(src)); code != http.StatusOK {
							if errs.Add(1) == 1 {
								b.Errorf("apply %d = %d %s", i, code, body)
							}
						}
						lat[i] = time.Since(t0)
					}
				})
			}
			workers.Wait()
			applied := time.Since(start)
			placedAll := func() bool {
				for _, a := range agents {
					placed := 0
					for _, rec := range a.placements() {
						if rec.State == StatePlaced {
							placed++
						}
					}
					if placed < n {
						return false
					}
				}
				return true
			}
			// A generous bound: at 2000 policies every agent saw them all placed
			// in 58-84 s on a shared 2-core machine, once over 100 s. Polled
			// every second: every 100ms, listing every agent's view was 7% of
			// the CPU at 10,000 policies.
			lastLog := time.Now()
			meshtest.Poll(b, bound, time.Second, "every policy placed at every agent", func() bool {
				if time.Since(lastLog) > 5*time.Second && testing.Verbose() {
					lastLog = time.Now()
					var line []string
					for _, a := range agents {
						st := map[string]int{}
						for _, rec := range a.placements() {
							st[rec.State]++
						}
						line = append(line, fmt.Sprintf("%s:%d/%d/%d", a.Mesh().Name(), st[StatePlaced], st[StatePending], st[StateFailed]))
					}
					b.Logf("%4.0fs placed/pending/failed %s", time.Since(start).Seconds(), strings.Join(line, " "))
				}
				return placedAll()
			}, func() {
				for _, a := range agents {
					states, shown := map[string]int{}, 0
					for key, rec := range a.placements() {
						states[rec.State]++
						if rec.State != StatePlaced && shown < 3 {
							shown++
							b.Logf("%s: %s %s epoch %d by %s on %s: %s", a.Mesh().Name(), key, rec.State, rec.Epoch, rec.Owner, rec.NodeNames(), rec.Message)
						}
					}
					b.Logf("%s: %d placements %v", a.Mesh().Name(), len(a.placements()), states)
				}
			})
			settled := time.Since(start)
			// Settled entries of the policies and placements keep their
			// values in the store alone (mesh.Config.Spill) once held for
			// two minutes: memory is read after that, as it stays. Every
			// one of them, the last written included: a count of spills
			// reached 2n while placements rewritten late were still held
			// whole, and the idle agents' heap then fell by a fifth
			// within the windows that measure it.
			meshtest.Poll(b, 5*time.Minute, time.Second, "every agent to spill its policies and placements", func() bool {
				for _, a := range agents {
					if a.Mesh().CatalogStats().Spilled < 2*n {
						return false
					}
				}
				return true
			}, func() {
				for _, a := range agents {
					b.Logf("%s: %+v", a.Mesh().Name(), a.Mesh().CatalogStats())
				}
			})
			// The catalog's own bytes (every policy and its placement, as
			// encoded), which every agent holds: the floor of its memory
			// per policy while the catalog is held in memory.
			catalogBytes := agents[0].Mesh().CatalogStats().Bytes
			// What the agents take with nothing to do: every policy placed,
			// no apply. Each pass, probe and sync still goes over
			// thousands of records. The median of a few windows: one that
			// holds a periodic push/pull or a store compaction reads high.
			// The resident set is read each second of those windows: a
			// periodic push/pull takes it up for a moment, and one reading
			// could fall on one.
			//
			// A collection first: the last one may have been while the
			// agents still held the burst (policies and placements not yet
			// spilled, repairs in flight), and the runtime keeps the heap
			// it set its goal by then until its next one, which an idle
			// agent makes within seconds to two minutes. Without it, one
			// build (8db1d68) read 5.4-6.4 KB a policy as that fell inside
			// the windows or not (STRATA_BENCH_RSS_TRACE shows it).
			runtime.GC()
			if path := os.Getenv("STRATA_BENCH_IDLE_HEAP_PROFILE"); path != "" {
				writeHeapProfile(b, path) // diffed with the one after (pprof -base): what idle agents allocate
			}
			stopProfile := startIdleProfile(b)
			var idle []float64
			var rssSeen []int64
			for range idleWindows {
				cpu0, idle0 := processCPU(), time.Now()
				// The sleeps are what is measured: a window in which
				// nothing is applied, read once a second (the sampling
				// period of the resident set), not a wait for a condition.
				for range int(idleWindow / time.Second) {
					time.Sleep(time.Second)
					rssSeen = append(rssSeen, processRSS())
					traceRSS(rssSeen[len(rssSeen)-1])
				}
				idle = append(idle, (processCPU()-cpu0).Seconds()/time.Since(idle0).Seconds()/float64(len(agents)))
			}
			stopProfile()
			slices.Sort(idle)
			idleCPU := idle[len(idle)/2]
			slices.Sort(rssSeen)
			rssPer := float64(rssSeen[len(rssSeen)/2]-rssBefore) / float64(n) / float64(len(agents))
			rssMaxPer := float64(rssSeen[len(rssSeen)-1]-rssBefore) / float64(n) / float64(len(agents))
			stopWatch()
			if path := os.Getenv("STRATA_BENCH_HEAP_PROFILE"); path != "" {
				writeHeapProfile(b, path) // what the agents hold, while they run
			}
			peak := stopPeak()
			heapPer := float64(heapInUse()-heapBefore) / float64(n) / float64(len(agents))
			livePer := float64(liveHeap()-liveBefore) / float64(n) / float64(len(agents)) // after heapInUse's collection
			outsidePer := float64(processRSS()-goMapped()-outsideBefore) / float64(n) / float64(len(agents))
			// What listing every placement costs once the agent keeps
			// few of them decoded (catalog: keeping), then again at once.
			listMS := func() float64 {
				t0 := time.Now()
				if code, body := post(b, h, http.MethodGet, "/v1/placements", nil); code != http.StatusOK {
					b.Fatalf("GET /v1/placements = %d %.200s", code, body)
				}
				return float64(time.Since(t0).Microseconds()) / 1e3
			}
			coldList, warmList := listMS(), listMS()
			slices.Sort(lat)
			b.ReportMetric(float64(n)/applied.Seconds(), "applies/s")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "apply-p99-ms")
			b.ReportMetric(settled.Seconds(), "all-placed-s")
			b.ReportMetric(passP99(b, agents, "reconcile")*1e3, "reconcile-p99-ms")
			var slowest float64
			for _, step := range []string{"reconcile", "admit", "rollouts", "experiments"} {
				slowest = max(slowest, passP99(b, agents, step))
			}
			b.ReportMetric(slowest*1e3, "slowest-step-p99-ms")
			b.ReportMetric(heapPer, "heap-B/policy/agent")
			b.ReportMetric(livePer, "live-heap-B/policy/agent")
			if rssBefore > 0 {
				b.ReportMetric(rssPer, "rss-B/policy/agent")
				b.ReportMetric(rssMaxPer, "rss-max-B/policy/agent")
				b.ReportMetric(outsidePer, "outside-go-B/policy/agent")
			}
			b.ReportMetric(coldList, "list-placements-ms")
			b.ReportMetric(warmList, "list-placements-again-ms")
			b.ReportMetric(float64(peak-liveBefore)/float64(n)/float64(len(agents)), "peak-heap-B/policy/agent")
			b.ReportMetric(float64(catalogBytes)/float64(n), "catalog-B/policy")
			b.ReportMetric(idleCPU*100, "idle-cpu-%/agent")
			b.ReportMetric(float64(failedSeen.Load()), "failed-sightings")
		}
	})
}

// startIdleProfile starts a CPU profile of the idle windows into
// STRATA_BENCH_IDLE_PROFILE, when set, and returns what stops it.
func startIdleProfile(b *testing.B) func() {
	path := os.Getenv("STRATA_BENCH_IDLE_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err) // -cpuprofile too: one profile at a time
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// writeHeapProfile writes the in-use heap to path (go tool pprof reads it).
func writeHeapProfile(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkManyPolicies measures the CPU the agents take once every
// policy is placed over idleWindows windows of idleWindow each.
const (
	idleWindows = 5
	idleWindow  = 6 * time.Second
)

// processRSS is the process's resident set in bytes (VmRSS), 0 where it
// cannot be read. It counts what the Go runtime holds beyond the live
// heap (the garbage collector's headroom, freed spans not yet returned).
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// liveHeap is the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// goMapped is the memory the Go runtime holds from the system and has not
// handed back: the resident set less it is, near enough, what the process
// holds outside Go's heap (C allocations, the binary, libraries).
func goMapped() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// watchPeak samples the live heap until the function it returns is
// called, which returns the most seen. With STRATA_BENCH_PEAK_PROFILE
// set, it writes the heap there at each new peak (10% over the last).
func watchPeak(b *testing.B) func() uint64 {
	path := os.Getenv("STRATA_BENCH_PEAK_PROFILE")
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var peak, profiled uint64
		// The tick is the sampling period of what is measured, not a
		// wait for a condition.
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
			v := liveHeap()
			peak = max(peak, v)
			if path != "" && v > profiled*11/10 {
				profiled = v
				// The heap as the last collection found it: no GC forced.
				if f, err := os.Create(path); err == nil {
					_ = pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}
	}()
	stopped := sync.OnceValue(func() uint64 { close(stop); return <-done })
	b.Cleanup(func() { stopped() }) // also when the benchmark fails first
	return stopped
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// passP99 is the p99 of the named controller step's pass times over every
// agent, as the upper bound of the histogram bucket that holds it.
func passP99(b *testing.B, agents []*Agent, step string) float64 {
	counts := map[float64]uint64{}
	var total uint64
	for _, a := range agents {
		mfs, err := a.reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "strata_controller_pass_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if !hasLabel(m, "step", step) {
					continue
				}
				total += m.GetHistogram().GetSampleCount()
				for _, bk := range m.GetHistogram().GetBucket() {
					counts[bk.GetUpperBound()] += bk.GetCumulativeCount()
				}
			}
		}
	}
	bounds := make([]float64, 0, len(counts))
	for ub := range counts {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	for _, ub := range bounds {
		if float64(counts[ub]) >= 0.99*float64(total) {
			return ub
		}
	}
	return math.Inf(1)
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// traceRSS writes, with STRATA_BENCH_RSS_TRACE=FILE set, what the resident
// set rss is made of as the runtime counts it, a line each call.
func traceRSS(rss int64) {
	path := os.Getenv("STRATA_BENCH_RSS_TRACE")
	if path == "" {
		return
	}
	names := []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/free:bytes", "/memory/classes/heap/stacks:bytes", "/gc/heap/goal:bytes", "/gc/heap/live:bytes", "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s rss=%d", time.Now().Format("15:04:05"), rss>>20)
	for i, n := range names {
		fmt.Fprintf(f, " %s=%d", strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(n, "/memory/classes"), "/gc"), ":bytes"), s[i].Value.Uint64()>>20)
	}
	fmt.Fprintln(f)
}

package agent

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// trialsPolicy is a sweep of trivial exec trials: each appends its job ID
// and output directory (under the running agent's data directory) to a
// file of the benchmark's, so a trial run twice, or on two agents, shows
// there, then reports score = q.
const trialsPolicy = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: %s}
spec:
  resources: {cpu: 10m, memory: 16Mi}
  tiers: [onprem, cloud, edge]
  command: [sh, -c, 'echo "$STRATA_JOB_ID $STRATA_OUTPUT_DIR" >> %s; echo "{\"score\": $STRATA_PARAM_Q}" > "$STRATA_OUTPUT_DIR/metrics.json"']
  sweep:
    algorithm: random
    maxTrials: %d
    parallelTrials: %d
    objective: {metric: score, goal: maximize}
    parameters:
      - {name: q, min: 0, max: 1}
`

// BenchmarkSweepTrialsUnderLoad runs STRATA_BENCH_TRIALS (default 200; the
// steadiness target is 1000) sweep trials, 50 to a sweep, 5 of a sweep at
// a time, on the 8-agent dev mesh (WAN delays between sites, the agent's
// own failure detection) with STRATA_BENCH_BUSY (default 3) busy loops per
// core beside it. It counts what must be 0: trial policies whose placement
// was seen written by two owners (each agent's view, looked at twice a
// second), trials that ran twice, and experiments that did not end within
// STRATA_BENCH_SECONDS (default 1800) of the applies; and reports trials
// per second and how often a member was seen failed.
func BenchmarkSweepTrialsUnderLoad(b *testing.B) {
	trials, busy, secs := 200, 3, 1800
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_BUSY")); err == nil && v >= 0 {
		busy = v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	const perSweep = 50
	sweeps := (trials + perSweep - 1) / perSweep
	b.Run("impl=strata", func(b *testing.B) {
		for range b.N {
			agents, runs := trialsMesh(b)
			meshtest.BusyLoops(b, busy*runtime.NumCPU(), time.Duration(secs)*time.Second+time.Minute)
			start := time.Now()
			for i := range sweeps {
				n := min(perSweep, trials-i*perSweep)
				pol := fmt.Sprintf(trialsPolicy, fmt.Sprintf("sweep-%d", i), runs, n, 5)
				meshtest.WaitFor(b, 120*time.Second, "sweep applied", func() bool {
					code, _ := post(b, agents[i%len(agents)].Handler(), http.MethodPost, "/v1/policies", []byte(pol))
					return code == http.StatusOK
				})
			}
			owners := map[string]map[string]bool{}
			deadline := start.Add(time.Duration(secs) * time.Second)
			var ended, failedSeen int
			lastRuns, lastMoved := 0, time.Now()
			for time.Now().Before(deadline) {
				// Two minutes with no trial run: stuck; say where.
				if n := lineCount(runs); n != lastRuns {
					lastRuns, lastMoved = n, time.Now()
				} else if time.Since(lastMoved) > 2*time.Minute {
					b.Logf("no trial ran for 2 minutes after %d runs", n)
					break
				}
				for _, a := range agents {
					for _, m := range a.Mesh().Members() {
						if m.Status == mesh.StatusFailed {
							failedSeen++
						}
					}
					recs, _ := a.cat.Placements.Values()
					for _, r := range recs {
						if owners[r.Key] == nil {
							owners[r.Key] = map[string]bool{}
						}
						owners[r.Key][r.Owner] = true
					}
				}
				ended = 0
				for i := range sweeps {
					if e, err := agents[0].cat.Experiments.Value(fmt.Sprintf("sweep-%d", i)); err == nil && e.Ended() {
						ended++
					}
				}
				if ended == sweeps {
					break
				}
				// The cadence of the looks, as a user polling would; the loop
				// ends at the deadline or when every experiment ended.
				time.Sleep(500 * time.Millisecond)
			}
			wall := time.Since(start)
			twoOwners := 0
			for key, by := range owners {
				if len(by) > 1 {
					twoOwners++
					b.Logf("%s placed by %d owners: %v", key, len(by), by)
				}
			}
			ran, twice := countRuns(b, runs)
			states := map[string]int{}
			for i := range sweeps {
				e, err := agents[0].cat.Experiments.Value(fmt.Sprintf("sweep-%d", i))
				if err != nil {
					states["missing"]++
					continue
				}
				states[string(e.State)]++
				if !e.Ended() {
					b.Logf("sweep-%d stuck: %s %s, %d trials", i, e.State, e.Message, len(e.Trials))
					for _, tr := range e.Trials {
						if trialEnded(tr.State) {
							continue
						}
						b.Logf("  trial %s: %s on %q %s", tr.Job, tr.State, tr.Node, tr.Error)
						for _, a := range agents {
							rec, ok := placementOf(a, "TrainingJob/"+tr.Job)
							j, jerr := a.cat.Jobs.Value(tr.Job)
							n, _ := a.Mesh().Node(a.Mesh().Name())
							var as []string
							for _, x := range n.Assignments {
								if x.Key == "TrainingJob/"+tr.Job {
									as = append(as, fmt.Sprintf("e%d accepted=%v %s", x.Epoch, x.Accepted, x.Reason))
								}
							}
							_, perr := a.cat.Policies.Value("TrainingJob/" + tr.Job)
							b.Logf("    at %s: policy %v; placement %v %s e%d by %s on %s: %s; job %v %s e%d on %s; own assignment %v",
								a.Mesh().Name(), perr == nil, ok, rec.State, rec.Epoch, rec.Owner, rec.NodeNames(), rec.Message, jerr == nil, j.State, j.Epoch, j.Node, as)
						}
					}
				}
			}
			b.Logf("%d trials in %d sweeps with %d busy loops per core: %s; %d trial runs, %d trials run twice, %d placed by two owners, experiments %v",
				trials, sweeps, busy, wall.Round(time.Second), ran, twice, twoOwners, states)
			b.Logf("controller pass p99 (histogram bucket): reconcile %gs, experiments %gs; pauses %g; members seen failed %d times",
				passP99(b, agents, "reconcile"), passP99(b, agents, "experiments"), sumCounter(b, agents, "strata_controller_pauses_total"), failedSeen)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(twoOwners), "two-owners")
			b.ReportMetric(float64(twice), "run-twice")
			b.ReportMetric(float64(sweeps-ended), "stuck")
			b.ReportMetric(float64(ran)/wall.Seconds(), "trials/s")
			if twoOwners+twice > 0 || ended != sweeps {
				b.Errorf("%d placed by two owners, %d run twice, %d of %d experiments stuck", twoOwners, twice, sweeps-ended, sweeps)
			}
		}
	})
}

// trialEnded says whether a trial in state is over.
func trialEnded(state string) bool {
	return state == catalog.JobSucceeded || state == catalog.JobFailed || state == catalog.TrialStopped
}

// lineCount is the number of lines in the file at path, 0 when absent.
func lineCount(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// countRuns reads the runs file of trialsPolicy: how many runs it lists,
// and how many jobs ran more than once.
func countRuns(b *testing.B, path string) (runs, twice int) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	by := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, _, _ := strings.Cut(sc.Text(), " ")
		by[id]++
		runs++
	}
	for id, n := range by {
		if n > 1 {
			twice++
			b.Logf("%s ran %d times", id, n)
		}
	}
	return runs, twice
}

// BenchmarkTrialOverhead runs a 32-trial sweep of trials that do nothing
// (an exec job that writes its metric), one at a time, on the 8-agent dev
// mesh (WAN delays between sites, the agent's own gossip timings): every
// second of it is control plane. It reports wall seconds per trial and,
// from the experiment's record, the median from one trial's end to the
// next one's start (recording it, proposing the next, placing it, its
// node admitting it and starting it) and from a trial's start to its end.
func BenchmarkTrialOverhead(b *testing.B) {
	b.Run("impl=strata", func(b *testing.B) {
		for range b.N {
			agents, runs := trialsMesh(b)
			pol := fmt.Sprintf(trialsPolicy, "overhead", runs, 32, 1)
			start := time.Now()
			meshtest.WaitFor(b, 120*time.Second, "sweep applied", func() bool {
				code, _ := post(b, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(pol))
				return code == http.StatusOK
			})
			var e catalog.Experiment
			meshtest.WaitFor(b, 10*time.Minute, "the sweep to end", func() bool {
				var err error
				e, err = agents[0].cat.Experiments.Value("overhead")
				return err == nil && e.Ended()
			})
			wall := time.Since(start)
			if e.State != catalog.ExperimentSucceeded || len(e.Trials) != 32 {
				b.Fatalf("experiment %s with %d trials: %s", e.State, len(e.Trials), e.Message)
			}
			var between, run []time.Duration
			for i, tr := range e.Trials {
				run = append(run, tr.Finished.Sub(tr.Started))
				if i > 0 {
					between = append(between, tr.Started.Sub(e.Trials[i-1].Finished))
				}
			}
			slices.Sort(between)
			slices.Sort(run)
			b.Logf("32 trials in %s: end to next start median %s (min %s, max %s); start to end median %s",
				wall.Round(100*time.Millisecond), between[len(between)/2], between[0], between[len(between)-1], run[len(run)/2])
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(wall.Seconds()/32, "s/trial")
			b.ReportMetric(between[len(between)/2].Seconds(), "end-to-next-start-s")
			b.ReportMetric(run[len(run)/2].Seconds(), "start-to-end-s")
		}
	})
}

// sumCounter adds up counter name over every agent.
func sumCounter(b *testing.B, agents []*Agent, name string) float64 {
	var sum float64
	for _, a := range agents {
		mfs, err := a.reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// trialsMesh starts the 8-agent dev mesh of the trial benchmarks (WAN
// delays between sites, the agent's own gossip timings) and names the
// file its trials list their runs in.
func trialsMesh(b *testing.B) ([]*Agent, string) {
	keys, err := NewDevPKI()
	if err != nil {
		b.Fatal(err)
	}
	agents := devMeshWAN(b, 8, true, func(c *Config) { c.PKI, c.MeshTimings = keys, nil })
	return agents, filepath.Join(b.TempDir(), "runs")
}

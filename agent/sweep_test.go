package agent

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

const sweepPolicy = `apiVersion: strata/v1
kind: TrainingJob
metadata:
  name: tune
  labels: {strata.io/output-model: tuned}
spec:
  data: [{dataset: cases}]
  resources: {cpu: 500m, memory: 256Mi}
  tiers: [onprem, cloud]
  builtin: {algorithm: logreg, label: y, epochs: 1, learningRate: 0.0001}
  sweep:
    algorithm: grid
    maxTrials: 4
    parallelTrials: 2
    parameters:
      - {name: learningRate, values: [0.0001, 0.1]}
      - {name: epochs, values: [1, 30]}
`

// TestSweepFindsABetterModel: a grid sweep over the builtin trainer's
// learning rate and epochs runs its four trials as training jobs, two at
// a time, finds settings better than the job's own (a tiny rate for one
// epoch), and registers a model trained with them, whose lineage names
// the final job and its parameters.
func TestSweepFindsABetterModel(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 4, func(c *Config) { c.PKI = keys })
	gpu := agents[3]
	var csv bytes.Buffer
	if err := loopData(rand.New(rand.NewPCG(5, 6)), 1000, 0).WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	publishFile(t, gpu, storage.PublishSpec{Kind: storage.KindDataset, Name: "cases", Version: "1"}, csv.Bytes())
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/policies?file=tune.yaml", []byte(sweepPolicy)); code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}
	var e catalog.Experiment
	// Read where the model is looked up: an experiment that names its
	// model is ready only once the model's manifest is there too.
	meshtest.WaitFor(t, 120*time.Second, "the sweep to end", func() bool {
		rs, err := agents[2].cat.Experiments.Ready()
		for _, r := range rs {
			if r.Key == "tune" && r.Value.Ended() {
				e = r.Value
				return err == nil
			}
		}
		return false
	})
	if e.State != catalog.ExperimentSucceeded || len(e.Trials) != 4 || e.Best < 0 {
		t.Fatalf("experiment = %+v", e)
	}
	def, best := -1.0, e.Trials[e.Best]
	for _, tr := range e.Trials {
		if tr.State != catalog.JobSucceeded || !tr.HasValue {
			t.Errorf("trial %+v did not succeed with a value", tr)
		}
		if tr.Params["learningRate"] == "0.0001" && tr.Params["epochs"] == "1" {
			def = tr.Value
		}
	}
	if def < 0 || best.Value <= def || best.Params["epochs"] != "30" {
		t.Errorf("best trial %+v (accuracy %.3f) is not better than the job's own settings (%.3f)", best.Params, best.Value, def)
	}
	m, err := agents[2].art.Lookup(storage.KindModel, "tuned", e.Version)
	if err != nil || e.Model != "tuned" {
		t.Fatalf("registered model %s@%s: %v", e.Model, e.Version, err)
	}
	l, ok, err := catalog.LineageOf(m.Metadata)
	if !ok || err != nil || l.Job != e.Final || l.Params["learningRate"] != best.Params["learningRate"] || l.Params["epochs"] != "30" || l.Metrics["accuracy"] != best.Value {
		t.Errorf("lineage of %s@%s = %+v, %v; want the final job %s with the best trial's parameters and accuracy %.4f", e.Model, e.Version, l, err, e.Final, best.Value)
	}
	t.Logf("%s: %s", e.State, e.Message)
	// The sweep itself is not placed; its trials are.
	if _, ok := placementOf(agents[0], "TrainingJob/tune"); ok {
		t.Error("the sweep's own TrainingJob was placed")
	}
}

// BenchmarkSweepParallel runs the same 32-trial random search over the
// builtin trainer on a 4-agent mesh with parallelTrials 1 and 4: wall
// time from apply to the experiment's end, and the best accuracy each
// reached (the same seed proposes the same trials, so the best is the
// same; the wall time is what parallel trials buy).
func BenchmarkSweepParallel(b *testing.B) {
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("impl=parallel-%d", par), func(b *testing.B) {
			var wall, best float64
			for range b.N {
				keys, err := NewDevPKI()
				if err != nil {
					b.Fatal(err)
				}
				agents := devMesh(b, 4, func(c *Config) { c.PKI = keys })
				// A fifth of the labels flipped: no setting reaches 1.
				r := rand.New(rand.NewPCG(5, 6))
				ds := loopData(r, 2000, 0)
				for i := range ds.Y {
					if r.IntN(5) == 0 {
						ds.Y[i] = 1 - ds.Y[i]
					}
				}
				var csv bytes.Buffer
				if err := ds.WriteCSV(&csv); err != nil {
					b.Fatal(err)
				}
				publishFile(b, agents[3], storage.PublishSpec{Kind: storage.KindDataset, Name: "cases", Version: "1"}, csv.Bytes())
				pol := fmt.Sprintf(`apiVersion: strata/v1
kind: TrainingJob
metadata: {name: bench}
spec:
  data: [{dataset: cases}]
  resources: {cpu: 250m, memory: 128Mi}
  tiers: [onprem, cloud, edge]
  builtin: {algorithm: mlp, label: y, hidden: [16]}
  sweep:
    algorithm: random
    maxTrials: 32
    parallelTrials: %d
    parameters:
      - {name: learningRate, min: 0.0005, max: 0.5, scale: log}
      - {name: epochs, type: int, min: 2, max: 30}
`, par)
				start := time.Now()
				if code, body := post(b, agents[0].Handler(), http.MethodPost, "/v1/policies?file=bench.yaml", []byte(pol)); code != http.StatusOK {
					b.Fatalf("apply = %d %s", code, body)
				}
				var e catalog.Experiment
				meshtest.WaitFor(b, 10*time.Minute, "the sweep to end", func() bool {
					e, err = agents[0].cat.Experiments.Value("bench")
					return err == nil && e.Ended()
				})
				wall = time.Since(start).Seconds()
				if e.State != catalog.ExperimentSucceeded || e.Best < 0 {
					b.Fatalf("experiment = %s: %s", e.State, e.Message)
				}
				best = e.Trials[e.Best].Value
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(wall, "s/32-trials")
			b.ReportMetric(best, "best-accuracy")
		})
	}
}

// earlyPolicy is a sweep of an exec script that reports score = q × step
// for 12 steps, a quarter second apart: with q = 1 its curve falls below
// what the trials before it (q = 5, 6) had reached at the same step.
const earlyPolicy = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: early}
spec:
  resources: {cpu: 250m, memory: 64Mi}
  tiers: [onprem, cloud, edge]
  command: [sh, -c, 'i=1; while [ $i -le 12 ]; do echo "{\"step\": $i, \"score\": $((STRATA_PARAM_Q * i))}" >> "$STRATA_METRICS_FILE"; sleep 0.25; i=$((i+1)); done; echo "{\"score\": $((STRATA_PARAM_Q * 12))}" > "$STRATA_OUTPUT_DIR/metrics.json"']
  sweep:
    algorithm: grid
    maxTrials: 4
    parallelTrials: 1
    objective: {metric: score, goal: maximize}
    earlyStopping: {rule: median, minSteps: 3, minTrials: 2}
    parameters:
      - {name: q, values: [5, 6, 1, 7]}
`

// TestSweepStopsPoorTrials runs a sweep of exec trials that report their
// score per step: the runner records each trial's curve as it runs, and
// the median rule stops the poor trial while it runs, long before its
// twelve steps; the others run to their end.
func TestSweepStopsPoorTrials(t *testing.T) {
	agents := devMesh(t, 4)
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/policies?file=early.yaml", []byte(earlyPolicy)); code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}
	var e catalog.Experiment
	meshtest.WaitFor(t, 120*time.Second, "the sweep to end", func() bool {
		v, err := agents[0].cat.Experiments.Value("early")
		e = v
		return err == nil && v.Ended()
	})
	if e.State != catalog.ExperimentSucceeded || len(e.Trials) != 4 {
		t.Fatalf("experiment = %+v", e)
	}
	for _, tr := range e.Trials {
		q := tr.Params["q"]
		switch {
		case q == "1" && (tr.State != catalog.TrialStopped || len(tr.Curve) < 3 || len(tr.Curve) >= 12):
			t.Errorf("trial q=1: %s after %d steps (%s); want stopped early", tr.State, len(tr.Curve), tr.Error)
		case q != "1" && (tr.State != catalog.JobSucceeded || len(tr.Curve) != 12):
			t.Errorf("trial q=%s: %s with %d steps (%s); want succeeded with 12", q, tr.State, len(tr.Curve), tr.Error)
		}
	}
	for _, tr := range e.Trials {
		t.Logf("q=%s %s after %d steps %s", tr.Params["q"], tr.State, len(tr.Curve), tr.Error)
	}
	if best := e.Trials[e.Best]; best.Params["q"] != "7" || best.Value != 84 {
		t.Errorf("best trial %+v, want q=7 with score 84", best)
	}
	t.Logf("%s: %s", e.State, e.Message)
}

// TestDeletingASweepDeletesItsTrials: trials still running when their
// sweep is deleted are deleted with it (their jobs stop), and the
// experiment record is kept, marked deleted.
func TestDeletingASweepDeletesItsTrials(t *testing.T) {
	agents := devMesh(t, 3)
	const pol = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: doomed}
spec:
  resources: {cpu: 250m, memory: 64Mi}
  tiers: [onprem, cloud, edge]
  command: [sleep, "600"]
  maxDuration: 15m
  sweep:
    maxTrials: 4
    parallelTrials: 2
    objective: {metric: score}
    parameters:
      - {name: q, min: 0, max: 1}
`
	h := agents[0].Handler()
	if code, body := post(t, h, http.MethodPost, "/v1/policies?file=doomed.yaml", []byte(pol)); code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}
	trials := func(a *Agent) []string {
		var out []string
		ps, _ := a.cat.Policies.Values()
		for _, p := range ps {
			if doc, err := p.Document(); err == nil && doc.Metadata.Labels[catalog.LabelTrialOf] == "doomed" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	meshtest.WaitFor(t, 60*time.Second, "two trials running", func() bool {
		jobs, _ := agents[1].cat.Jobs.Values()
		running := 0
		for _, j := range jobs {
			if j.State == catalog.JobRunning {
				running++
			}
		}
		return len(trials(agents[1])) == 2 && running == 2
	})
	if code, body := post(t, h, http.MethodDelete, "/v1/policies/TrainingJob/doomed", nil); code != http.StatusOK {
		t.Fatalf("delete = %d %s", code, body)
	}
	meshtest.WaitFor(t, 60*time.Second, "the trials gone and the experiment deleted everywhere", func() bool {
		for _, a := range agents {
			if e, err := a.cat.Experiments.Value("doomed"); err != nil || e.State != catalog.ExperimentDeleted || len(trials(a)) > 0 {
				return false
			}
			jobs, _ := a.cat.Jobs.Values()
			for _, j := range jobs {
				if j.State == catalog.JobRunning {
					return false
				}
			}
		}
		return true
	})
}

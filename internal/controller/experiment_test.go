package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// TestTrialSource: a trial is the sweep's job without its sweep, with the
// parameters in its builtin block (or, for exec, its environment), and
// only the final job keeps the labels that register a model.
func TestTrialSource(t *testing.T) {
	t.Parallel()
	builtin := `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune, labels: {strata.io/output-model: m, team: a}}
spec:
  data: [{dataset: d}]
  builtin: {algorithm: mlp, label: y}
  sweep:
    parameters:
      - {name: hidden, values: ["[8, 8]", "[32]"]}
      - {name: learningRate, min: 0.001, max: 1, scale: log}
`
	exec := `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune}
spec:
  command: [python3, train.py]
  sweep:
    parameters:
      - {name: dropout, min: 0, max: 0.5}
`
	for _, c := range []struct {
		name, src string
		params    map[string]string
		final     bool
		want      []string
		not       []string
	}{
		{"trial", builtin, map[string]string{"hidden": "[8, 8]", "learningRate": "0.01"}, false,
			[]string{"name: tune-trial-1", "strata.io/trial-of: tune", "team: a", "hidden: [8, 8]", "learningRate: 0.01", "algorithm: mlp"},
			[]string{"sweep", "output-model"}},
		{"final", builtin, map[string]string{"hidden": "[32]", "learningRate": "0.5"}, true,
			[]string{"strata.io/output-model: m", "hidden: [32]", "learningRate: 0.5"}, []string{"sweep"}},
		{"exec", exec, map[string]string{"dropout": "0.25"}, false,
			[]string{"STRATA_PARAM_DROPOUT: \"0.25\"", "command: [python3, train.py]"}, []string{"sweep"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := catalog.Policy{Kind: "TrainingJob", Name: "tune", Source: c.src, Generation: 1}
			if !meshview.IsSweep(p) {
				t.Fatal("not seen as a sweep")
			}
			src, err := trialSource(p, "tune-trial-1", c.params, c.final)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(src, w) {
					t.Errorf("source lacks %q:\n%s", w, src)
				}
			}
			for _, n := range c.not {
				if strings.Contains(src, n) {
					t.Errorf("source has %q:\n%s", n, src)
				}
			}
			if meshview.IsSweep(catalog.Policy{Kind: "TrainingJob", Name: "tune-trial-1", Source: src}) {
				t.Error("a trial is itself a sweep")
			}
		})
	}
}

// TestMedianStopsPoorTrials: with two trials finished, a running trial
// whose curve falls below the median of their running averages is
// stopped (its policy deleted, its best value kept, never the best), a
// good one and one with too few steps go on; and without early stopping
// nothing is stopped.
func TestMedianStopsPoorTrials(t *testing.T) {
	t.Parallel()
	const src = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: es}
spec:
  command: [sh, train.sh]
  sweep:
    maxTrials: 5
    parallelTrials: 3
    objective: {metric: score}
    earlyStopping: {rule: median, minSteps: 3, minTrials: 2}
    parameters:
      - {name: q, values: [5, 6, 1, 7, 0]}
`
	for _, early := range []bool{true, false} {
		cat := catalog.New(catalogtest.NewStore(), nil)
		m := &fakeMesh{nodes: []mesh.Node{gpuNode("c", 4000)}}
		c := New(Config{Mesh: m, Catalog: cat})
		s := src
		if !early {
			s = strings.Replace(s, "    earlyStopping: {rule: median, minSteps: 3, minTrials: 2}\n", "", 1)
		}
		p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "es", Source: s, Generation: 1}
		doc, err := p.Document()
		if err != nil {
			t.Fatal(err)
		}
		steps := func(vs ...float64) []catalog.Step {
			var out []catalog.Step
			for i, v := range vs {
				out = append(out, catalog.Step{Step: i + 1, Metrics: map[string]float64{"score": v, "loss": 1}})
			}
			return out
		}
		jobs := []catalog.Job{
			{Name: "es-trial-1", State: catalog.JobSucceeded, Metrics: map[string]float64{"score": 15}, Steps: steps(5, 10, 15)},
			{Name: "es-trial-2", State: catalog.JobSucceeded, Metrics: map[string]float64{"score": 18}, Steps: steps(6, 12, 18)},
			{Name: "es-trial-3", State: catalog.JobRunning, Steps: steps(1, 2, 3)},   // below the median (11 at step 3)
			{Name: "es-trial-4", State: catalog.JobRunning, Steps: steps(7, 14, 21)}, // above it
			{Name: "es-trial-5", State: catalog.JobRunning, Steps: steps(0, 0)},      // too few steps
		}
		e := catalog.Experiment{Name: "es", Key: p.Key(), Generation: 1, Metric: "score", Goal: policy.GoalMaximize, State: catalog.ExperimentRunning, Best: -1}
		for _, j := range jobs {
			if _, err := cat.Jobs.Put(j); err != nil {
				t.Fatal(err)
			}
			if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindTrainingJob, Name: j.Name, Generation: 1}); err != nil {
				t.Fatal(err)
			}
			e.Trials = append(e.Trials, catalog.Trial{Job: j.Name, State: catalog.JobPending})
		}
		if err := c.advanceExperiment(p, doc, &e); err != nil {
			t.Fatal(err)
		}
		var stopped []string
		for _, tr := range e.Trials {
			if tr.State == catalog.TrialStopped {
				stopped = append(stopped, tr.Job)
				if tr.Value != 3 || tr.HasValue || !strings.Contains(tr.Error, "stopped early at step 3") {
					t.Errorf("stopped trial %+v: want its best value 3, no value for the best, and why", tr)
				}
				if _, err := cat.Policies.Get(policy.KindTrainingJob + "/" + tr.Job); err == nil {
					t.Errorf("stopped trial %s's policy is still applied", tr.Job)
				}
			}
		}
		want := []string{"es-trial-3"}
		if !early {
			want = nil
		}
		if !slices.Equal(stopped, want) {
			t.Errorf("early stopping %v: stopped %v, want %v", early, stopped, want)
		}
		if e.Best != 1 || len(e.Trials[3].Curve) != 3 {
			t.Errorf("best trial %d, curve of trial 4 %v: want trial 2 best and trial 4's curve kept", e.Best, e.Trials[3].Curve)
		}
	}
}

// sweepSource is a sweep "tune" of four categorical points, two at a
// time, failing after one failed trial.
const sweepSource = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune}
spec:
  command: [sh, train.sh]
  sweep:
    algorithm: grid
    maxTrials: 4
    parallelTrials: 2
    maxFailedTrials: 1
    objective: {metric: score}
    parameters:
      - {name: q, values: [1, 2, 3, 4]}
`

// TestSweepAppliedAgainStartsAfresh: a sweep deleted and applied again
// under its name gets a later generation, so trials of its own: the
// deleted run's job records (never deleted) are not read as its results.
// The deleted run's experiment stays, marked deleted, its running trial
// stopped.
func TestSweepAppliedAgainStartsAfresh(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat})
	const key = policy.KindTrainingJob + "/tune"
	apply := func() catalog.Policy {
		t.Helper()
		p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "tune", Source: sweepSource, Generation: cat.NextGeneration(key)}
		if _, err := cat.Policies.Put(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := apply()
	if p.Generation != 1 {
		t.Fatalf("first apply: generation %d, want 1", p.Generation)
	}
	c.experiments()
	e, err := cat.Experiments.Value("tune")
	if err != nil || len(e.Trials) != 2 {
		t.Fatalf("first run: %+v, %v: want two trials", e, err)
	}
	// The first trial succeeds with the best score there will be; the
	// second is still running when the sweep is deleted.
	for _, j := range []catalog.Job{
		{Name: e.Trials[0].Job, Key: policy.KindTrainingJob + "/" + e.Trials[0].Job, Generation: 1, State: catalog.JobSucceeded, Metrics: map[string]float64{"score": 99}},
		{Name: e.Trials[1].Job, Key: policy.KindTrainingJob + "/" + e.Trials[1].Job, Generation: 1, State: catalog.JobRunning},
	} {
		if _, err := cat.Jobs.Put(j); err != nil {
			t.Fatal(err)
		}
	}
	c.experiments()
	if err := cat.Policies.Delete(key); err != nil {
		t.Fatal(err)
	}
	c.experiments()
	old, err := cat.Experiments.Value("tune")
	if err != nil || old.State != catalog.ExperimentDeleted || old.Trials[1].State != catalog.TrialStopped {
		t.Fatalf("deleted sweep's experiment: %+v, %v: want it kept, deleted, its running trial stopped", old, err)
	}
	if _, err := cat.Policies.Get(policy.KindTrainingJob + "/" + old.Trials[1].Job); err == nil {
		t.Errorf("the deleted sweep's running trial %s is still applied", old.Trials[1].Job)
	}

	p = apply()
	if p.Generation != 2 {
		t.Fatalf("applied again: generation %d, want 2", p.Generation)
	}
	c.experiments()
	e, err = cat.Experiments.Value("tune")
	if err != nil {
		t.Fatal(err)
	}
	if e.Generation != 2 || e.State != catalog.ExperimentRunning || e.Best != -1 || len(e.Trials) != 2 {
		t.Fatalf("second run: generation %d, %s, best %d, %d trials: want a fresh running experiment", e.Generation, e.State, e.Best, len(e.Trials))
	}
	for i, tr := range e.Trials {
		if tr.Job == old.Trials[i].Job || tr.HasValue || tr.State != catalog.JobPending {
			t.Errorf("second run's trial %d: %s %s (value %v): want a new, pending job", i, tr.Job, tr.State, tr.HasValue)
		}
	}
}

// TestFailedExperimentStopsItsTrials: past maxFailedTrials the
// experiment fails and stops its running trials, saying so.
func TestFailedExperimentStopsItsTrials(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat})
	p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "tune", Source: sweepSource, Generation: 1}
	doc, err := p.Document()
	if err != nil {
		t.Fatal(err)
	}
	e := catalog.Experiment{Name: "tune", Key: p.Key(), Generation: 1, Metric: "score", Goal: policy.GoalMaximize, State: catalog.ExperimentRunning, Best: -1}
	for i, st := range []string{catalog.JobFailed, catalog.JobFailed, catalog.JobRunning} {
		name := fmt.Sprintf("tune-trial-%d", i+1)
		if _, err := cat.Jobs.Put(catalog.Job{Name: name, State: st, Error: "exit 1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindTrainingJob, Name: name, Generation: 1}); err != nil {
			t.Fatal(err)
		}
		e.Trials = append(e.Trials, catalog.Trial{Job: name, State: catalog.JobPending})
	}
	if err := c.advanceExperiment(p, doc, &e); err != nil {
		t.Fatal(err)
	}
	if e.State != catalog.ExperimentFailed || !strings.Contains(e.Message, "stopped 1 running trials") {
		t.Fatalf("experiment %s (%s): want failed, saying it stopped the running trial", e.State, e.Message)
	}
	if tr := e.Trials[2]; tr.State != catalog.TrialStopped || !strings.Contains(tr.Error, "the experiment failed") {
		t.Errorf("running trial: %s (%s), want stopped because the experiment failed", tr.State, tr.Error)
	}
	if _, err := cat.Policies.Get(policy.KindTrainingJob + "/tune-trial-3"); err == nil {
		t.Error("the running trial's policy is still applied: its job goes on")
	}
}

// TestNaNObjectiveSaysSo: a trial whose objective came out NaN fails
// saying so, not as if it reported none.
func TestNaNObjectiveSaysSo(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat})
	p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "tune", Source: sweepSource, Generation: 1}
	doc, err := p.Document()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Jobs.Put(catalog.Job{Name: "tune-trial-1", State: catalog.JobSucceeded, Metrics: map[string]float64{"loss": 1}, Invalid: map[string]string{"score": "NaN"}}); err != nil {
		t.Fatal(err)
	}
	e := catalog.Experiment{Name: "tune", Key: p.Key(), Generation: 1, Metric: "score", Goal: policy.GoalMaximize, State: catalog.ExperimentRunning, Best: -1,
		Trials: []catalog.Trial{{Job: "tune-trial-1", State: catalog.JobPending}}}
	if err := c.advanceExperiment(p, doc, &e); err != nil {
		t.Fatal(err)
	}
	if tr := e.Trials[0]; tr.State != catalog.JobFailed || tr.HasValue || !strings.Contains(tr.Error, "score = NaN") {
		t.Errorf("NaN trial: %s (%s), want failed saying score = NaN", tr.State, tr.Error)
	}
}

// TestFactsFollowTheSource: a policy's document is parsed once per source,
// and read again when its source changes under the same key: a new
// generation, or the policy deleted and applied again (generation 1, as a
// sweep's trial is, applied anew).
func TestFactsFollowTheSource(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	sweepSrc := "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: s}\nspec:\n  command: [\"true\"]\n  sweep:\n    maxTrials: 2\n    objective: {metric: score}\n    parameters:\n      - {name: q, min: 0, max: 1}\n"
	p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "s", Generation: 1, Source: sweepSrc}
	if !c.facts(p).sweep {
		t.Fatal("a sweep not read as one")
	}
	trial := p
	trial.Source = "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: s, labels: {" + catalog.LabelTrialOf + ": other}}\nspec:\n  command: [\"true\"]\n"
	trial.Generation = 2
	if f := c.facts(trial); f.sweep || f.trialOf != "other" {
		t.Errorf("the same key with a new source: %+v, want no sweep, a trial of other", f)
	}
	p.Applied = p.Applied.Add(time.Minute)
	if !c.facts(p).sweep {
		t.Error("applied again at generation 1: not read again")
	}
	c.forgetFacts(nil, nil)
	if len(c.docs) != 0 || len(c.shared) != 0 {
		t.Errorf("%d facts, %d shared kept for no policy", len(c.docs), len(c.shared))
	}
}

// Policies alike hold one docFacts; one with a part that is not
// comparable (a latency block) holds its own.
func TestAlikePoliciesShareFacts(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	svc := func(name, extra string) catalog.Policy {
		return catalog.Policy{Kind: policy.KindInferenceService, Name: name, Generation: 1,
			Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: " + name + "}\nspec:\n  model: {name: m, version: \"1\"}\n  replicas: 1\n" + extra}
	}
	a, b := c.facts(svc("a", "")), c.facts(svc("b", ""))
	if a != b || a.model.Name != "m" {
		t.Errorf("alike policies: %p %+v and %p %+v, want one, of model m", a, a, b, b)
	}
	l := c.facts(svc("l", "  latency: {p99: 15ms, clients: [edge-b]}\n"))
	if l == a || !slices.Equal(l.clients, []string{"edge-b"}) {
		t.Errorf("with clients: %+v, want its own, clients [edge-b]", l)
	}
	if o := c.facts(svc("o", "  prestage: true\n")); o == a || !o.prestage {
		t.Errorf("prestaged: %+v, want its own facts", o)
	}
}

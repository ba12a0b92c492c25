package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/sweep"
)

// docFacts is what every pass reads of a policy's document: parsing YAML
// for each policy on each pass cost 43% of the agents' CPU with 300 sweep
// trials applied (BenchmarkSweepTrialsUnderLoad). It is parsed once per
// source (see facts).
type docFacts struct {
	sweep   bool   // a TrainingJob with a sweep (IsSweep)
	retrain bool   // an InferenceService with a retrain block
	trialOf string // the sweep it is a trial of (LabelTrialOf)
	// autoscale and replicas are an autoscaled InferenceService's
	// bounds and target, and its starting count.
	autoscale *policy.Autoscale
	replicas  int
	// perSite is an InferenceService placed per client site.
	perSite bool
	// prestage is set for an InferenceService that prestages model.
	prestage bool
	model    policy.ModelRef
	// burst is an InferenceService's overflow tiers.
	burst *policy.Burst
	// clients are an InferenceService's latency client sites or regions.
	clients []string
}

// plainFacts are the docFacts without the parts that are not comparable:
// the facts of most policies, which many policies share (one model, no
// autoscale, burst or latency block).
type plainFacts struct {
	sweep, retrain, perSite, prestage bool
	trialOf                           string
	replicas                          int
	model                             policy.ModelRef
}

// maxSharedFacts bounds the distinct plainFacts the controller shares.
const maxSharedFacts = 4096

// factsOf is a policy's docFacts and the source they were read from:
// generation and applied identify it (a new source is a new generation,
// and a policy deleted and applied again is applied anew).
type factsOf struct {
	generation uint64
	applied    time.Time
	facts      *docFacts
}

// policyID is a policy's kind and name, its key in docs.
type policyID struct{ kind, name string }

// facts returns p's docFacts, parsing its source only when it changed.
// They are shared: read them, do not change them.
func (c *Controller) facts(p catalog.Policy) *docFacts {
	// Not a hash of the source: every step of a pass asks for every
	// policy's facts, and hashing 10,000 sources a step was a cost of
	// its own.
	key := policyID{p.Kind, p.Name} // not p.Key(): no string built a call
	c.mu.Lock()
	held, ok := c.docs[key]
	c.mu.Unlock()
	if ok && held.generation == p.Generation && held.applied.Equal(p.Applied) {
		return held.facts
	}
	f := &docFacts{}
	if doc, err := p.Document(); err == nil {
		f.sweep = doc.TrainingJob != nil && doc.TrainingJob.Sweep != nil
		f.retrain = doc.InferenceService != nil && doc.InferenceService.Retrain != nil
		f.trialOf = doc.Metadata.Labels[catalog.LabelTrialOf]
		if s := doc.InferenceService; s != nil {
			if s.Autoscale != nil {
				f.autoscale, f.replicas = s.Autoscale, s.Replicas
			}
			f.prestage, f.model, f.burst, f.perSite = s.Prestage, s.Model, s.Burst, s.PerClientSite
			if s.Latency != nil {
				f.clients = s.Latency.Clients
			}
		}
	}
	c.mu.Lock()
	f = c.shareFacts(f)
	c.docs[key] = factsOf{generation: p.Generation, applied: p.Applied, facts: f}
	c.mu.Unlock()
	return f
}

// shareFacts returns the held docFacts equal to f where f has no part
// that is not comparable, so that policies alike hold one (at 10,000
// policies, one each was a seventh of what the controller held per
// policy). Called with c.mu held.
func (c *Controller) shareFacts(f *docFacts) *docFacts {
	if f.autoscale != nil || f.burst != nil || f.clients != nil {
		return f
	}
	k := plainFacts{sweep: f.sweep, retrain: f.retrain, perSite: f.perSite, prestage: f.prestage, trialOf: f.trialOf, replicas: f.replicas, model: f.model}
	if held, ok := c.shared[k]; ok {
		return held
	}
	if len(c.shared) < maxSharedFacts {
		c.shared[k] = f
	}
	return f
}

// forgetFacts drops the docFacts of policies not in ps (those this agent
// owns), and what the controller keeps per policy (retries, the
// autoscaler's and the burst's waits, why a job is held) of those whose
// key is not among live (every policy's): a sweep's thousands of trials
// come and go, and a policy whose owner flaps away and back keeps its
// backoff. Run's goroutine only.
func (c *Controller) forgetFacts(ps []*catalog.Policy, live []string) {
	keep := make(map[policyID]bool, len(ps))
	for _, p := range ps {
		keep[policyID{p.Kind, p.Name}] = true
	}
	keys := make(map[string]bool, len(live))
	for _, k := range live {
		keys[k] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.docs {
		if !keep[k] {
			delete(c.docs, k)
		}
	}
	if len(c.docs) == 0 || len(c.shared) >= maxSharedFacts {
		// Policies that hold one keep it; those read from now on
		// share afresh. A sweep's trials each come with their own.
		clear(c.shared)
	}
	gone := func(key string) bool {
		policyKey, _, _ := strings.Cut(key, "\x00") // scaleLow's per client site
		return !keys[policyKey]
	}
	maps.DeleteFunc(c.lastTry, func(k string, _ time.Time) bool { return gone(k) })
	maps.DeleteFunc(c.tries, func(k string, _ int) bool { return gone(k) })
	maps.DeleteFunc(c.holding, func(k, _ string) bool { return gone(k) })
	maps.DeleteFunc(c.scaleLow, func(k string, _ scaleLow) bool { return gone(k) })
	maps.DeleteFunc(c.roomSince, func(k string, _ time.Time) bool { return gone(k) })
	maps.DeleteFunc(c.returning, func(k string, _ bool) bool { return gone(k) })
}

// experiments drives the hyperparameter searches this controller owns:
// it proposes trials, applies them as TrainingJobs, reads their metrics,
// and finally trains the registered model with the best trial's
// parameters.
func (c *Controller) experiments() {
	c.noteView(c.cfg.Mesh.Nodes(), time.Now())
	c.collectDeletedSweeps()
	for _, pp := range c.policies() {
		p := *pp
		if p.Kind != policy.KindTrainingJob || !c.facts(p).sweep || !c.owns(p.Key()) {
			continue
		}
		doc, _ := p.Document()
		sw := doc.TrainingJob.Sweep
		e, err := c.cfg.Catalog.Experiments.Value(p.Name)
		switch {
		case errors.Is(err, mesh.ErrNotFound) || (err == nil && e.Generation != p.Generation):
			e = catalog.Experiment{Name: p.Name, Key: p.Key(), Generation: p.Generation, Algorithm: sw.Algorithm,
				Metric: sw.Objective.Metric, Goal: sw.Objective.Goal, State: catalog.ExperimentRunning, Best: -1, Started: time.Now().UTC()}
		case err != nil:
			c.log.Warn("experiment record", "policy", p.Key(), "err", err)
			continue
		}
		before, _ := json.Marshal(e)
		if err := c.advanceExperiment(p, doc, &e); err != nil {
			c.log.Warn("experiment", "policy", p.Key(), "err", err)
		}
		if after, _ := json.Marshal(e); string(after) != string(before) {
			var deps []mesh.Dep
			if ref, ok := c.cfg.Catalog.Policies.Ref(p.Key()); ok {
				deps = append(deps, ref)
			}
			// A reader that sees the registered model named sees its
			// manifest too, or reads the experiment as pending.
			if e.Model != "" {
				key := c.cfg.Catalog.Manifests.Key(storage.Manifest{Kind: storage.KindModel, Name: e.Model, Version: e.Version})
				if ref, ok := c.cfg.Catalog.Manifests.Ref(key); ok {
					deps = append(deps, ref)
				}
			}
			if _, err := c.cfg.Catalog.Experiments.Put(e, deps...); err != nil {
				c.log.Warn("writing experiment", "policy", p.Key(), "err", err)
			}
		}
	}
}

// collectDeletedSweeps deletes what a deleted sweep leaves: its trials'
// policies (which stops the trials still running); its experiment record
// is kept, marked deleted, so that a sweep applied again under the name
// gets a later generation (catalog.NextGeneration) and so trials of its
// own. A sweep counts as deleted while its tombstone is held here; one
// merely not replicated yet does not.
func (c *Controller) collectDeletedSweeps() {
	gone := func(name string) bool {
		return c.cfg.Catalog.Policies.Deleted(policy.KindTrainingJob + "/" + name)
	}
	me := c.cfg.Mesh.Name()
	for _, pp := range c.policies() {
		p := *pp
		if p.Kind != policy.KindTrainingJob || c.ownerOf(p.Key()) != me {
			continue
		}
		if of := c.facts(p).trialOf; of != "" && gone(of) {
			if err := c.cfg.Catalog.Policies.Delete(p.Key()); err != nil {
				c.log.Warn("deleting a deleted sweep's trial", "sweep", of, "trial", p.Key(), "err", err)
				continue
			}
			c.log.Info("deleted a deleted sweep's trial", "sweep", of, "trial", p.Key())
		}
	}
	exps, _ := c.cfg.Catalog.Experiments.Values()
	for _, e := range exps {
		if e.State == catalog.ExperimentDeleted || !gone(e.Name) || c.ownerOf(e.Key) != me {
			continue
		}
		now := time.Now().UTC()
		c.stopTrials(e.Key, &e, now, "stopped: the sweep was deleted")
		e.State, e.Message, e.Finished = catalog.ExperimentDeleted, "the sweep was deleted; "+e.Message, now
		if _, err := c.cfg.Catalog.Experiments.Put(e); err != nil {
			c.log.Warn("marking a deleted sweep's experiment", "sweep", e.Name, "err", err)
		}
	}
}

// space is a sweep's search space as the algorithms take it.
func space(sw *policy.Sweep) sweep.Space {
	out := make(sweep.Space, len(sw.Parameters))
	for i, prm := range sw.Parameters {
		out[i] = sweep.Param{Name: prm.Name, Kind: prm.Type, Min: prm.Min, Max: prm.Max, Log: prm.Scale == "log", Choices: prm.Values}
	}
	return out
}

func (c *Controller) advanceExperiment(p catalog.Policy, doc *policy.Document, e *catalog.Experiment) error {
	if e.Ended() {
		return nil
	}
	sw := doc.TrainingJob.Sweep
	maximize := sw.Objective.Goal == policy.GoalMaximize
	now := time.Now().UTC()
	end := func(state, format string, args ...any) {
		e.State, e.Message, e.Finished = state, fmt.Sprintf(format, args...), now
		if state == catalog.ExperimentFailed {
			// Nothing will read their results: stop them rather than
			// leave them running and shown running.
			if n := c.stopTrials(p.Key(), e, now, "stopped: the experiment failed"); n > 0 {
				e.Message += fmt.Sprintf("; stopped %d running trials", n)
			}
		}
		c.log.Info("experiment ended", "policy", p.Key(), "state", state, "message", e.Message)
	}
	failed := c.syncTrials(e)
	if e.State == catalog.ExperimentRunning {
		c.stopPoorTrials(p, sw, e, maximize, now)
	}
	reached := markBest(e, sw.Objective, maximize)

	switch e.State {
	case catalog.ExperimentRunning:
		if failed > sw.MaxFailedTrials {
			end(catalog.ExperimentFailed, "%d trials failed, more than maxFailedTrials %d", failed, sw.MaxFailedTrials)
			return nil
		}
		alg, err := sweep.New(sw.Algorithm, space(sw), uint64(sw.Seed), sweep.Options{Maximize: maximize})
		if err != nil {
			end(catalog.ExperimentFailed, "%v", err)
			return err
		}
		running := 0
		for _, tr := range e.Trials {
			if !trialEnded(tr.State) {
				running++
			}
		}
		exhausted := false
		for running < sw.ParallelTrials && len(e.Trials) < sw.MaxTrials && !reached {
			hist := make([]sweep.Trial, len(e.Trials))
			for i, tr := range e.Trials {
				// A stopped trial counts with its best value so far.
				hist[i] = sweep.Trial{Point: tr.Point, Value: tr.Value, Done: tr.HasValue || tr.State == catalog.TrialStopped}
			}
			pt, ok := alg.Next(hist)
			if !ok {
				exhausted = true
				break
			}
			params := space(sw).Values(pt)
			name := jobName(p, fmt.Sprintf("trial-%d", len(e.Trials)+1))
			if err := c.applyTrial(p, name, params, false); err != nil {
				end(catalog.ExperimentFailed, "trial %s: %v", name, err)
				return err
			}
			e.Trials = append(e.Trials, catalog.Trial{Job: name, Params: params, Point: pt, State: catalog.JobPending})
			running++
		}
		if running > 0 || !(len(e.Trials) >= sw.MaxTrials || reached || exhausted) {
			return nil
		}
		if e.Best < 0 {
			end(catalog.ExperimentFailed, "no trial succeeded")
			return nil
		}
		best := e.Trials[e.Best]
		if doc.Metadata.Labels[catalog.LabelOutputModel] == "" {
			end(catalog.ExperimentSucceeded, "best: %s with %s (%s=%.4g)", best.Job, formatParams(best.Params), e.Metric, best.Value)
			return nil
		}
		e.Final = jobName(p, "final")
		if err := c.applyTrial(p, e.Final, best.Params, true); err != nil {
			end(catalog.ExperimentFailed, "final training %s: %v", e.Final, err)
			return err
		}
		e.State = catalog.ExperimentTraining
		e.Message = fmt.Sprintf("best: %s with %s (%s=%.4g); training the model with them as %s", best.Job, formatParams(best.Params), e.Metric, best.Value, e.Final)
	case catalog.ExperimentTraining:
		j, err := c.cfg.Catalog.Jobs.Value(e.Final)
		if err != nil || !j.Terminal() {
			return nil
		}
		if j.State == catalog.JobFailed {
			end(catalog.ExperimentFailed, "final training %s failed: %s", e.Final, j.Error)
			return nil
		}
		key := c.cfg.Catalog.Manifests.Key(storage.Manifest{Kind: storage.KindModel, Name: j.Model, Version: j.Version})
		if _, ok := c.cfg.Catalog.Manifests.Ref(key); !ok && j.Model != "" {
			return nil // the model's manifest has not replicated here yet
		}
		e.Model, e.Version = j.Model, j.Version
		end(catalog.ExperimentSucceeded, "best: %s with %s (%s=%.4g); registered %s@%s", e.Trials[e.Best].Job,
			formatParams(e.Trials[e.Best].Params), e.Metric, e.Trials[e.Best].Value, j.Model, j.Version)
	}
	return nil
}

// syncTrials copies into e's trials what their jobs' records say, and
// returns how many trials failed. A trial that succeeded without a
// finite value for the experiment's metric failed.
func (c *Controller) syncTrials(e *catalog.Experiment) (failed int) {
	for i := range e.Trials {
		tr := &e.Trials[i]
		if !trialEnded(tr.State) {
			if j, err := c.cfg.Catalog.Jobs.Value(tr.Job); err == nil {
				tr.State, tr.Node, tr.Started, tr.Finished, tr.Error = j.State, j.Node, j.Started, j.Finished, j.Error
				tr.Curve = curveOf(j.Steps, e.Metric)
				if j.State == catalog.JobSucceeded {
					tr.Metrics = j.Metrics
					if v, ok := j.Metrics[e.Metric]; ok {
						tr.Value, tr.HasValue = v, true
					} else if bad, ok := j.Invalid[e.Metric]; ok {
						tr.State, tr.Error = catalog.JobFailed, fmt.Sprintf("the trial reported %s = %s in its metrics.json: not a number the search can rank", e.Metric, bad)
					} else {
						tr.State, tr.Error = catalog.JobFailed, fmt.Sprintf("the trial reported no %q in its metrics.json", e.Metric)
					}
				}
			}
		}
		if tr.State == catalog.JobFailed {
			failed++
		}
	}
	return failed
}

// markBest sets e.Best to the trial with the best value (-1: none yet),
// and says whether it reached the objective's target.
func markBest(e *catalog.Experiment, obj policy.Objective, maximize bool) (reached bool) {
	e.Best = -1
	for i, tr := range e.Trials {
		if tr.HasValue && (e.Best < 0 || (maximize && tr.Value > e.Trials[e.Best].Value) || (!maximize && tr.Value < e.Trials[e.Best].Value)) {
			e.Best = i
		}
	}
	if e.Best >= 0 && obj.Target != 0 {
		v := e.Trials[e.Best].Value
		reached = (maximize && v >= obj.Target) || (!maximize && v <= obj.Target)
	}
	return reached
}

// trialEnded says a trial's job will not change any more.
func trialEnded(state string) bool {
	return state == catalog.JobSucceeded || state == catalog.JobFailed || state == catalog.TrialStopped
}

// curveOf is metric's value at every step that reported it.
func curveOf(steps []catalog.Step, metric string) []float64 {
	var out []float64
	for _, s := range steps {
		if v, ok := s.Metrics[metric]; ok {
			out = append(out, v)
		}
	}
	return out
}

// stopPoorTrials applies the sweep's early stopping to its running
// trials: a trial whose curve the rule condemns is stopped (its policy is
// deleted, so its job ends) and keeps its best value so far for the
// search, but cannot be the best trial.
func (c *Controller) stopPoorTrials(p catalog.Policy, sw *policy.Sweep, e *catalog.Experiment, maximize bool, now time.Time) {
	es := sw.EarlyStopping
	if es == nil || es.Rule != policy.StopMedian {
		return
	}
	var finished [][]float64
	for _, tr := range e.Trials {
		if tr.State == catalog.JobSucceeded && len(tr.Curve) > 0 {
			finished = append(finished, tr.Curve)
		}
	}
	if len(finished) < es.MinTrials {
		return
	}
	for i := range e.Trials {
		tr := &e.Trials[i]
		if tr.State != catalog.JobRunning || !sweep.MedianStop(tr.Curve, finished, maximize, es.MinSteps) {
			continue
		}
		best := tr.Curve[0]
		for _, v := range tr.Curve {
			if (maximize && v > best) || (!maximize && v < best) {
				best = v
			}
		}
		if err := c.cfg.Catalog.Policies.Delete(policy.KindTrainingJob + "/" + tr.Job); err != nil && !errors.Is(err, mesh.ErrNotFound) {
			c.log.Warn("stopping a trial", "policy", p.Key(), "trial", tr.Job, "err", err)
			continue
		}
		tr.State, tr.Value, tr.Finished = catalog.TrialStopped, best, now
		tr.Error = fmt.Sprintf("stopped early at step %d: its best %s so far, %.4g, is worse than the median of %d finished trials' running averages", len(tr.Curve), e.Metric, best, len(finished))
		c.log.Info("trial stopped early", "policy", p.Key(), "trial", tr.Job, "steps", len(tr.Curve), e.Metric, best)
	}
}

// stopTrials stops the experiment's trials that have not ended: their
// policies are deleted (so their jobs end) and they read stopped, with
// why. It returns how many it stopped; a trial whose policy could not be
// deleted is left as it was (the next pass tries again).
func (c *Controller) stopTrials(key string, e *catalog.Experiment, now time.Time, why string) int {
	n := 0
	for i := range e.Trials {
		tr := &e.Trials[i]
		if trialEnded(tr.State) {
			continue
		}
		if err := c.cfg.Catalog.Policies.Delete(policy.KindTrainingJob + "/" + tr.Job); err != nil && !errors.Is(err, mesh.ErrNotFound) {
			c.log.Warn("stopping a trial", "policy", key, "trial", tr.Job, "err", err)
			continue
		}
		tr.State, tr.Error, tr.Finished = catalog.TrialStopped, why, now
		n++
	}
	return n
}

// jobName names an experiment's job for the policy's generation.
func jobName(p catalog.Policy, suffix string) string {
	if p.Generation > 1 {
		return fmt.Sprintf("%s-g%d-%s", p.Name, p.Generation, suffix)
	}
	return p.Name + "-" + suffix
}

func formatParams(params map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		out = append(out, k+"="+params[k])
	}
	return strings.Join(out, " ")
}

// applyTrial applies the sweep's TrainingJob as job name with params set:
// builtin settings in its builtin block, otherwise $STRATA_PARAM_<NAME>
// in its env. Only the final job keeps the labels that register a model.
func (c *Controller) applyTrial(p catalog.Policy, name string, params map[string]string, final bool) error {
	if _, err := c.cfg.Catalog.Policies.Get(policy.KindTrainingJob + "/" + name); err == nil {
		return nil // applied on an earlier pass whose record did not land
	}
	src, err := trialSource(p, name, params, final)
	if err != nil {
		return err
	}
	// The trial's owner places it next: it hears of it at once.
	owner := c.ownerOf(policy.KindTrainingJob + "/" + name)
	_, err = c.cfg.Catalog.Policies.PutNotify(catalog.Policy{Kind: policy.KindTrainingJob, Name: name, Source: src, File: p.File,
		Generation: 1, Applied: time.Now().UTC(), AppliedAt: c.cfg.Mesh.Name(), Site: p.Site}, []string{owner})
	return err
}

// trialSource writes a trial's TrainingJob document: the sweep's, less
// its sweep block, with the parameters set and a trial-of label.
func trialSource(p catalog.Policy, name string, params map[string]string, final bool) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(p.Source), &root); err != nil {
		return "", err
	}
	if len(root.Content) == 0 {
		return "", fmt.Errorf("%s: empty source", p.Key())
	}
	doc := root.Content[0]
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str"} }
	meta := ensureMap(doc, "metadata")
	setKey(meta, "name", str(name))
	labels := ensureMap(meta, "labels")
	if !final {
		deleteKey(labels, catalog.LabelOutputModel)
		deleteKey(labels, catalog.LabelOutputVersion)
	}
	setKey(labels, catalog.LabelTrialOf, str(p.Name))
	spec := ensureMap(doc, "spec")
	deleteKey(spec, "sweep")
	docs, err := policy.Parse(p.File, []byte(p.Source))
	if err != nil || len(docs) != 1 || docs[0].TrainingJob == nil {
		return "", fmt.Errorf("%s: %v", p.Key(), err)
	}
	builtin := docs[0].TrainingJob.Launcher == policy.LauncherBuiltin
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if builtin {
			var v yaml.Node
			if err := yaml.Unmarshal([]byte(params[k]), &v); err != nil || len(v.Content) == 0 {
				return "", fmt.Errorf("parameter %s: value %q is not YAML: %v", k, params[k], err)
			}
			setKey(ensureMap(spec, "builtin"), k, v.Content[0])
			continue
		}
		setKey(ensureMap(spec, "env"), "STRATA_PARAM_"+strings.ToUpper(k), str(params[k]))
	}
	return render(p.File, doc)
}

func ensureMap(n *yaml.Node, key string) *yaml.Node {
	if v := mapValue(n, key); v != nil && v.Kind == yaml.MappingNode {
		return v
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	setKey(n, key, m)
	return m
}

func setKey(n *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = v
			return
		}
	}
	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key, Tag: "!!str"}, v)
}

func deleteKey(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

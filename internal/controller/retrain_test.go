package controller

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/policy"
)

// retrainSvcSource is a canaried service s of model m with a retrain block.
const retrainSvcSource = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: s}
spec:
  model: {name: m, version: "1"}
  replicas: 1
  resources: {cpu: 10m, memory: 16Mi}
  rollout: {strategy: canary, canaryRequests: 10}
  retrain:
    resources: {cpu: "1", memory: 1Gi}
    builtin: {algorithm: logreg, label: y, epochs: 1}
`

// mustPut fails t when put does.
func mustPut(t *testing.T, put func() error) {
	t.Helper()
	if err := put(); err != nil {
		t.Fatal(err)
	}
}

// putService applies retrainSvcSource as service s and, when placed,
// its placement on edge-1.
func putService(t *testing.T, cat *catalog.Catalog, placed bool) {
	t.Helper()
	mustPut(t, func() error {
		_, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: retrainSvcSource, Generation: 1})
		return err
	})
	if placed {
		mustPut(t, func() error {
			_, err := cat.Placements.Put(catalog.Placement{Key: "InferenceService/s", Kind: policy.KindInferenceService, Name: "s", Generation: 1,
				State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "edge-1", Site: "edge"}}})
			return err
		})
	}
}

func TestRetrainBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{0, 15 * time.Minute}, {1, 15 * time.Minute}, {2, 30 * time.Minute}, {3, time.Hour}, {4, time.Hour}, {1000, time.Hour}} {
		if got := retrainBackoff(tc.attempt); got != tc.want {
			t.Errorf("retrainBackoff(%d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
}

// TestRetrainLoopEnds replays the loop users measured: a canary rolled back
// for drift puts the old version back, whose monitor alarms again at once
// on the same traffic, and each retrain registers the rolled-back model's
// bytes under a new version. Now the alarm waits out a backoff that
// doubles, and a retrain that yields a model already tried ends unchanged
// without a canary.
func TestRetrainLoopEnds(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/s"
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat, Artifacts: fakeArtifacts{
		"m@1": {Name: "m", Version: "1", Digest: "aaaa1111aaaa1111"},
		"m@2": {Name: "m", Version: "2", Digest: "bbbb2222bbbb2222"},
		"m@3": {Name: "m", Version: "3", Digest: "bbbb2222bbbb2222"}, // m@2's bytes again
		"m@4": {Name: "m", Version: "4", Digest: "aaaa1111aaaa1111"}, // m@1's bytes again
	}})
	putService(t, cat, true)
	alarm := func(version string, served uint64) {
		t.Helper()
		mustPut(t, func() error {
			_, err := cat.Drift.Put(catalog.Drift{Policy: key, Model: "m", Version: version, Site: "edge", Node: "edge-1",
				Alarmed: true, AlarmAt: time.Now().Add(time.Second).UTC(), Served: served})
			return err
		})
	}
	trained := func(job, version string) {
		t.Helper()
		mustPut(t, func() error {
			_, err := cat.Jobs.Put(catalog.Job{Name: job, State: catalog.JobSucceeded, Model: "m", Version: version, Node: "gpu-1"})
			return err
		})
	}
	rollout := func() catalog.Rollout {
		t.Helper()
		c.rollouts()
		r, err := cat.Rollouts.Value(key)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// waited moves the rollout's backoff into the past, as if it passed.
	waited := func() {
		t.Helper()
		r, err := cat.Rollouts.Value(key)
		if err != nil {
			t.Fatal(err)
		}
		r.NextRetrainAfter = time.Now().Add(-time.Second).UTC()
		mustPut(t, func() error { _, err := cat.Rollouts.Put(r); return err })
	}
	jobs := func() int {
		t.Helper()
		n := 0
		ps, _ := cat.Policies.Values()
		for _, p := range ps {
			if p.Kind == policy.KindTrainingJob {
				n++
			}
		}
		return n
	}
	backoff := func(r catalog.Rollout, want time.Duration) {
		t.Helper()
		if got := time.Until(r.NextRetrainAfter); got < want-2*time.Second || got > want {
			t.Errorf("next retrain in %s, want %s", got.Round(time.Second), want)
		}
		if !strings.Contains(r.Message, "next retrain of m@1 not before") {
			t.Errorf("message %q does not say when the next retrain may start", r.Message)
		}
	}

	// Drift on m@1: retrain 1, canary m@2, which drifts too: rolled back.
	alarm("1", 0)
	if r := rollout(); r.Stage != catalog.StageRetraining || r.Job != "s-retrain-1" || r.Attempt != 1 {
		t.Fatalf("after the first alarm: %s %s attempt %d (%s), want retraining s-retrain-1", r.Stage, r.Job, r.Attempt, r.Message)
	}
	trained("s-retrain-1", "2")
	if r := rollout(); r.Stage != catalog.StageCanary {
		t.Fatalf("after the job: %s (%s), want canary", r.Stage, r.Message)
	}
	alarm("2", 3)
	r := rollout()
	if r.Stage != catalog.StageRolledBack {
		t.Fatalf("canary drifted: %s (%s), want rolled back", r.Stage, r.Message)
	}
	backoff(r, 15*time.Minute)

	// m@1's monitor restarts on the canary node and alarms again at once:
	// that waits.
	alarm("1", 0)
	if r := rollout(); r.Stage != catalog.StageRolledBack || jobs() != 0 || !strings.Contains(r.Message, "waits") {
		t.Fatalf("alarm within the backoff: %s, %d jobs (%s), want it to wait", r.Stage, jobs(), r.Message)
	}

	// After the wait the same alarm retrains; the model is m@2's bytes
	// again, rolled back before: unchanged, no canary, twice the wait.
	waited()
	if r := rollout(); r.Stage != catalog.StageRetraining || r.Job != "s-retrain-2" || r.Attempt != 2 {
		t.Fatalf("after the backoff: %s %s attempt %d (%s), want retraining s-retrain-2", r.Stage, r.Job, r.Attempt, r.Message)
	}
	trained("s-retrain-2", "3")
	r = rollout()
	if r.Stage != catalog.StageUnchanged || len(r.CanaryNodes) != 0 || !strings.Contains(r.Message, "is m@2 again (rolled-back") {
		t.Fatalf("m@2's bytes again: %s on %v (%s), want unchanged, no canary", r.Stage, r.CanaryNodes, r.Message)
	}
	backoff(r, 30*time.Minute)

	// Once more: the served model's bytes, unchanged, and the wait doubles.
	waited()
	alarm("1", 0)
	if r := rollout(); r.Stage != catalog.StageRetraining || r.Attempt != 3 {
		t.Fatalf("third alarm: %s attempt %d (%s), want retraining", r.Stage, r.Attempt, r.Message)
	}
	trained("s-retrain-3", "4")
	r = rollout()
	if r.Stage != catalog.StageUnchanged || !strings.Contains(r.Message, "already served") {
		t.Fatalf("m@1's bytes again: %s (%s), want unchanged", r.Stage, r.Message)
	}
	backoff(r, time.Hour)
	var tried []string
	for _, m := range r.Tried {
		tried = append(tried, m.Version+"="+m.Outcome)
	}
	if got, want := strings.Join(tried, " "), "2=rolled-back 1=served"; got != want {
		t.Errorf("tried %s, want %s", got, want)
	}
}

// TestRolloutMetrics drives one service's rollouts through every ending
// (rolled back, failed, unchanged, promoted) and scrapes the counters
// after each pass; a pass that decides nothing new counts nothing.
func TestRolloutMetrics(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/s"
	reg := prometheus.NewRegistry()
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat, Registerer: reg, Artifacts: fakeArtifacts{
		"m@1": {Name: "m", Version: "1", Digest: "aaaa1111aaaa1111"},
		"m@2": {Name: "m", Version: "2", Digest: "bbbb2222bbbb2222"},
		"m@3": {Name: "m", Version: "3", Digest: "aaaa1111aaaa1111"}, // m@1's bytes again
		"m@4": {Name: "m", Version: "4", Digest: "cccc3333cccc3333"},
	}})
	putService(t, cat, true)
	drift := func(version string, alarmed bool, served uint64) {
		t.Helper()
		mustPut(t, func() error {
			_, err := cat.Drift.Put(catalog.Drift{Policy: key, Model: "m", Version: version, Site: "edge", Node: "edge-1",
				Alarmed: alarmed, AlarmAt: time.Now().Add(time.Second).UTC(), Served: served})
			return err
		})
	}
	job := func(name, state, version string) {
		t.Helper()
		mustPut(t, func() error {
			_, err := cat.Jobs.Put(catalog.Job{Name: name, State: state, Model: "m", Version: version, Node: "gpu-1"})
			return err
		})
	}
	waited := func() {
		t.Helper()
		r, err := cat.Rollouts.Value(key)
		if err != nil {
			t.Fatal(err)
		}
		r.NextRetrainAfter = time.Now().Add(-time.Second).UTC()
		mustPut(t, func() error { _, err := cat.Rollouts.Put(r); return err })
	}
	// pass runs one rollouts pass, checks the stage it left and that
	// another pass counts nothing more, and returns the counters.
	var m map[string]float64
	pass := func(stage string) {
		t.Helper()
		c.rollouts()
		if r, err := cat.Rollouts.Value(key); err != nil || r.Stage != stage {
			t.Fatalf("rollout %s (%s, %v), want %s", r.Stage, r.Message, err, stage)
		}
		m = meshtest.Scrape(t, reg)
		c.rollouts()
		if again := meshtest.Scrape(t, reg); !maps.Equal(again, m) {
			t.Fatalf("a pass that decided nothing counted:\n%v\nafter\n%v", again, m)
		}
	}
	const (
		started    = `strata_retrains_started_total{service="s"}`
		succeeded  = `strata_retrains_total{outcome="succeeded",service="s"}`
		failed     = `strata_retrains_total{outcome="failed",service="s"}`
		promoted   = `strata_rollouts_total{outcome="promoted",service="s"}`
		rolledBack = `strata_rollouts_total{outcome="rolled_back",service="s"}`
		unchanged  = `strata_rollouts_total{outcome="unchanged",service="s"}`
		ended      = `strata_rollouts_total{outcome="failed",service="s"}`
	)
	want := func(when string, counts map[string]float64) {
		t.Helper()
		for _, k := range []string{started, succeeded, failed, promoted, rolledBack, unchanged, ended} {
			v, ok := m[k]
			if !ok || v != counts[k] {
				t.Errorf("%s: %s = %v (exported %v), want %v", when, k, v, ok, counts[k])
			}
		}
	}

	// Drift on m@1: retrain; m@2 canaried; it drifts too: rolled back.
	drift("1", true, 0)
	pass(catalog.StageRetraining)
	want("retrain started", map[string]float64{started: 1})
	job("s-retrain-1", catalog.JobSucceeded, "2")
	pass(catalog.StageCanary)
	want("canary", map[string]float64{started: 1, succeeded: 1})
	drift("2", true, 3)
	pass(catalog.StageRolledBack)
	want("canary drifted", map[string]float64{started: 1, succeeded: 1, rolledBack: 1})

	// The next retrain's job fails.
	waited()
	drift("1", true, 0)
	pass(catalog.StageRetraining)
	job("s-retrain-2", catalog.JobFailed, "")
	pass(catalog.StageFailed)
	want("job failed", map[string]float64{started: 2, succeeded: 1, failed: 1, rolledBack: 1, ended: 1})

	// The next gives the served model's bytes: unchanged.
	waited()
	drift("1", true, 0)
	pass(catalog.StageRetraining)
	job("s-retrain-3", catalog.JobSucceeded, "3")
	pass(catalog.StageUnchanged)
	want("same bytes", map[string]float64{started: 3, succeeded: 2, failed: 1, rolledBack: 1, ended: 1, unchanged: 1})

	// The next canary serves its 10 requests without drift: promoted.
	waited()
	drift("1", true, 0)
	pass(catalog.StageRetraining)
	job("s-retrain-4", catalog.JobSucceeded, "4")
	pass(catalog.StageCanary)
	drift("4", false, 10)
	pass(catalog.StagePromoted)
	want("promoted", map[string]float64{started: 4, succeeded: 3, failed: 1, rolledBack: 1, ended: 1, unchanged: 1, promoted: 1})
}

// TestRolloutsEnd: a retrain that yields the served model's bytes ends the
// rollout unchanged; a canary that does not serve its requests within the
// canary timeout is rolled back, saying so.
func TestRolloutsEnd(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Catalog: cat, Artifacts: fakeArtifacts{
		"m@1": {Name: "m", Version: "1", Digest: "aaaa1111bbbb2222"},
		"m@2": {Name: "m", Version: "2", Digest: "aaaa1111bbbb2222"},
		"m@3": {Name: "m", Version: "3", Digest: "cccc3333dddd4444"},
	}})
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Generation: 1}
	doc := &policy.Document{InferenceService: &policy.InferenceServiceSpec{Model: policy.ModelRef{Name: "m"},
		Rollout: &policy.Rollout{Strategy: policy.RolloutCanary, CanaryRequests: 100, CanaryTimeout: policy.Duration(time.Minute)}}}

	if _, err := cat.Jobs.Put(catalog.Job{Name: "s-retrain-1", State: catalog.JobSucceeded, Version: "2", Node: "gpu-1"}); err != nil {
		t.Fatal(err)
	}
	r := catalog.Rollout{Policy: p.Key(), Stage: catalog.StageRetraining, Model: "m", From: "1", Job: "s-retrain-1"}
	if err := c.advance(p, doc, &r, true, nil); err != nil {
		t.Fatal(err)
	}
	if r.Stage != catalog.StageUnchanged || !strings.Contains(r.Message, "already served") {
		t.Errorf("same bytes: stage %s (%s), want unchanged", r.Stage, r.Message)
	}

	started := time.Now().Add(-2 * time.Minute)
	r = catalog.Rollout{Policy: p.Key(), Stage: catalog.StageCanary, Model: "m", From: "1", To: "3", CanaryNodes: []string{"edge-a-1"}, CanaryRequests: 100,
		Steps: []catalog.RolloutStep{{Time: started, Stage: catalog.StageCanary}}}
	drifts := []catalog.Drift{{Policy: p.Key(), Version: "3", Node: "edge-a-1", Served: 7}}
	if err := c.advance(p, doc, &r, true, drifts); err != nil {
		t.Fatal(err)
	}
	if r.Stage != catalog.StageRolledBack || !strings.Contains(r.Message, "served 7 of 100 requests in 1m0s (rollout.canaryTimeout)") {
		t.Errorf("slow canary: stage %s (%s), want rolled back for the timeout", r.Stage, r.Message)
	}
}

// TestShortAlarmStartsARetrain: an alarm that cleared before the owner
// read the node's drift record is in the node's drift log, and starts the
// retrain the record no longer shows; an alarm logged for another version
// starts nothing.
func TestShortAlarmStartsARetrain(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/s"
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("ctl")}}, Catalog: cat, Artifacts: fakeArtifacts{
		"m@1": {Name: "m", Version: "1", Digest: "aaaa1111aaaa1111"},
	}})
	putService(t, cat, false)
	// The record says the monitor is fine again: the alarm has cleared.
	mustPut(t, func() error {
		_, err := cat.Drift.Put(catalog.Drift{Policy: key, Model: "m", Version: "1", Site: "edge", Node: "edge-1", State: catalog.DriftOK})
		return err
	})
	log := catalog.DriftLog{Policy: key, Model: "m", Site: "edge", Node: "edge-1"}
	at := time.Now().UTC()
	log.Append(catalog.DriftEntry{Kind: catalog.DriftAlarm, At: at, Version: "0", Samples: 50, Source: "stream", Feature: "x", Statistic: 9})
	mustPut(t, func() error { _, err := cat.DriftLogs.Put(log); return err })
	c.rollouts()
	if r, err := cat.Rollouts.Value(key); err == nil {
		t.Fatalf("an alarm on version 0, not served, started %s: %s", r.Stage, r.Message)
	}

	log.Append(catalog.DriftEntry{Kind: catalog.DriftAlarm, At: at.Add(time.Second), Version: "1", Samples: 80, Source: "stream", Feature: "x", Statistic: 7.5})
	log.Append(catalog.DriftEntry{Kind: catalog.DriftClear, At: at.Add(2 * time.Second), Version: "1", Samples: 120, Source: "stream"})
	mustPut(t, func() error { _, err := cat.DriftLogs.Put(log); return err })
	c.rollouts()
	r, err := cat.Rollouts.Value(key)
	if err != nil || r.Stage != catalog.StageRetraining {
		t.Fatalf("after a short alarm on the served version: %v %+v; want a retrain", err, r)
	}
	if tr := r.Trigger; tr == nil || tr.Node != "edge-1" || tr.Samples != 80 || tr.Feature != "x" || tr.Statistic != 7.5 || tr.Detector != "cusum" {
		t.Errorf("trigger %+v; want edge-1's alarm at 80 rows, x crossing at 7.5 (cusum)", r.Trigger)
	}
}

// canaryService is a controller for service s of model m (versions 1
// and 2, of other bytes) that watches drift and canaries 100 requests.
func canaryService() (*Controller, *catalog.Catalog, catalog.Policy, *policy.Document) {
	cat := catalog.New(catalogtest.NewStore(), nil)
	c := New(Config{Catalog: cat, Artifacts: fakeArtifacts{
		"m@1": {Name: "m", Version: "1", Digest: "aaaa1111aaaa1111"},
		"m@2": {Name: "m", Version: "2", Digest: "bbbb2222bbbb2222"},
	}})
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Generation: 1}
	doc := &policy.Document{InferenceService: &policy.InferenceServiceSpec{Model: policy.ModelRef{Name: "m"}, Drift: &policy.Drift{},
		Rollout: &policy.Rollout{Strategy: policy.RolloutCanary, CanaryRequests: 100}}}
	return c, cat, p, doc
}

// TestCanaryWaitsForItsMonitor: a canary is promoted only once its own
// drift monitor has judged, however fast its requests came: the requests
// alone (100 here) say nothing of drift while a window of 500 warms up.
// The promotion names what was judged; a monitor that never judges
// within the canary timeout rolls the canary back, saying so.
func TestCanaryWaitsForItsMonitor(t *testing.T) {
	t.Parallel()
	c, _, p, doc := canaryService()
	canary := func(started time.Time) catalog.Rollout {
		return catalog.Rollout{Policy: p.Key(), Stage: catalog.StageCanary, Model: "m", From: "1", To: "2", CanaryNodes: []string{"edge-a-1"}, CanaryRequests: 100,
			MaxErrorRate: 0.01, Steps: []catalog.RolloutStep{{Time: started, Stage: catalog.StageCanary}}}
	}
	rec := func(state string, seen int64, alarmed bool) []catalog.Drift {
		return []catalog.Drift{{Policy: p.Key(), Version: "2", Node: "edge-a-1", Detector: "ks", Window: 500, Ready: true,
			State: state, Seen: seen, Served: uint64(seen), Alarmed: alarmed}}
	}
	advance := func(r *catalog.Rollout, drifts []catalog.Drift) {
		t.Helper()
		if err := c.advance(p, doc, r, true, drifts); err != nil {
			t.Fatal(err)
		}
	}

	// 150 requests, enough by count, but the monitor still warms up.
	r := canary(time.Now())
	advance(&r, rec(catalog.DriftWarming, 150, false))
	if r.Stage != catalog.StageCanary || !strings.Contains(r.Message, "waiting for the drift monitor on edge-a-1 to judge (edge-a-1: warming, 150 of 500 rows)") {
		t.Fatalf("warming canary: %s %q; want it waiting for its monitor", r.Stage, r.Message)
	}
	// It judges: no drift, promoted, saying on what evidence.
	advance(&r, rec(catalog.DriftOK, 600, false))
	if r.Stage != catalog.StagePromoted || !strings.Contains(r.Message, "no drift on edge-a-1 after 600 rows") {
		t.Errorf("judged canary: %s %q; want promoted on its monitor's judgement", r.Stage, r.Message)
	}
	// At 3,000 requests, the same: drift rolls it back, none promotes it.
	r = canary(time.Now())
	advance(&r, rec(catalog.DriftAlarm, 3000, true))
	if r.Stage != catalog.StageRolledBack {
		t.Errorf("drifting canary: %s %q; want rolled back", r.Stage, r.Message)
	}
	// A monitor that never judges within the canary timeout.
	r = canary(time.Now().Add(-policy.DefaultCanaryTimeout - time.Minute))
	advance(&r, rec(catalog.DriftWarming, 300, false))
	if r.Stage != catalog.StageRolledBack || !strings.Contains(r.Message, "had not judged") {
		t.Errorf("canary never judged: %s %q; want rolled back, saying its monitor had not judged", r.Stage, r.Message)
	}
	// A monitor that cannot run is named as such, not as warming.
	r = canary(time.Now())
	broken := rec(catalog.DriftError, 0, false)
	broken[0].Served, broken[0].Error = 150, "feature \"x\" is not an input"
	advance(&r, broken)
	if r.Stage != catalog.StageCanary || !strings.Contains(r.Message, `edge-a-1: its monitor cannot run: feature "x" is not an input`) {
		t.Errorf("canary with a broken monitor: %s %q; want it waiting, naming the monitor's error", r.Stage, r.Message)
	}
	// A service without drift monitoring is promoted on its requests.
	plain := &policy.Document{InferenceService: &policy.InferenceServiceSpec{Model: policy.ModelRef{Name: "m"}}}
	r = canary(time.Now())
	if err := c.advance(p, plain, &r, true, []catalog.Drift{{Policy: p.Key(), Version: "2", Node: "edge-a-1", Served: 120}}); err != nil {
		t.Fatal(err)
	}
	if r.Stage != catalog.StagePromoted {
		t.Errorf("unmonitored canary: %s %q; want promoted", r.Stage, r.Message)
	}
}

// TestCanaryJudgedAgainstTheSite: a canary is judged against what the
// current version did on the same nodes before the swap. Failures at the
// rate the current version had there are the site's traffic, and do not
// roll it back; failing more does. The verdict names both versions'
// evidence.
func TestCanaryJudgedAgainstTheSite(t *testing.T) {
	t.Parallel()
	c, cat, p, doc := canaryService()
	// The retrain's job is done: the canary starts with version 1's
	// record on edge-a-1 as its baseline (3% of its requests failed).
	if _, err := cat.Jobs.Put(catalog.Job{Name: "s-retrain-1", State: catalog.JobSucceeded, Version: "2", Node: "gpu-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Placements.Put(catalog.Placement{Key: p.Key(), Kind: p.Kind, Name: p.Name, Epoch: 1, Generation: 1, State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "edge-a-1", Site: "edge-a"}}}); err != nil {
		t.Fatal(err)
	}
	start := func() catalog.Rollout {
		t.Helper()
		r := catalog.Rollout{Policy: p.Key(), Stage: catalog.StageRetraining, Model: "m", From: "1", Job: "s-retrain-1", CanarySite: "edge-a", CanaryRequests: 100, MaxErrorRate: 0.01,
			Trigger: &catalog.DriftTrigger{Node: "edge-a-1", Site: "edge-a", Feature: "a", Detector: "cusum", Statistic: 1.12, Samples: 411}}
		before := []catalog.Drift{{Policy: p.Key(), Version: "1", Node: "edge-a-1", Served: 1000, Failed: 30, Alarmed: true, AlarmSeen: 411, AlarmSource: "stream", AlarmFeature: "a", AlarmStatistic: 1.12}}
		if err := c.advance(p, doc, &r, true, before); err != nil {
			t.Fatal(err)
		}
		if r.Stage != catalog.StageCanary || r.Baseline == nil || r.Baseline.Served != 1000 || r.Baseline.Failed != 30 || !strings.Contains(r.Baseline.Drift, "an alarm on a (cusum 1.12) after 411 rows on edge-a-1") {
			t.Fatalf("canary start: %s %+v; want version 1's record on edge-a-1 as the baseline", r.Stage, r.Baseline)
		}
		return r
	}
	judged := func(served, failed uint64) []catalog.Drift {
		return []catalog.Drift{{Policy: p.Key(), Version: "2", Node: "edge-a-1", Detector: "ks", Window: 200, Ready: true, State: catalog.DriftOK, Seen: 600,
			Served: served, Failed: failed, Scores: []catalog.Score{{Name: "a", Statistic: 0.05, PValue: 0.4}}}}
	}

	// 2.5% failed: over the 1% limit, but no worse than version 1 there.
	r := start()
	if err := c.advance(p, doc, &r, true, judged(200, 5)); err != nil {
		t.Fatal(err)
	}
	if r.Stage != catalog.StagePromoted || !strings.Contains(r.Message, "served 200 requests, 5 failed (m@1 failed 30 of 1000 there before: 3.0%)") ||
		!strings.Contains(r.Message, "where m@1 had an alarm on a (cusum 1.12) after 411 rows on edge-a-1") {
		t.Errorf("canary failing as the site did: %s %q; want promoted, naming both versions' evidence", r.Stage, r.Message)
	}
	// 10% failed: worse than version 1 there.
	r = start()
	if err := c.advance(p, doc, &r, true, judged(200, 20)); err != nil {
		t.Fatal(err)
	}
	if r.Stage != catalog.StageRolledBack || !strings.Contains(r.Message, "failed 20 of 200 requests (10.0% > 1.0%; m@1 failed 30 of 1000 there before: 3.0%)") {
		t.Errorf("canary failing more than the site did: %s %q; want rolled back, saying so", r.Stage, r.Message)
	}
}

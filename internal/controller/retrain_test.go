package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
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
	put := func(put func() error) {
		t.Helper()
		if err := put(); err != nil {
			t.Fatal(err)
		}
	}
	put(func() error {
		_, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: retrainSvcSource, Generation: 1})
		return err
	})
	put(func() error {
		_, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "s", Generation: 1, State: catalog.StatePlaced,
			Nodes: []catalog.PlacedNode{{Name: "edge-1", Site: "edge"}}})
		return err
	})
	alarm := func(version string, served uint64) {
		t.Helper()
		put(func() error {
			_, err := cat.Drift.Put(catalog.Drift{Policy: key, Model: "m", Version: version, Site: "edge", Node: "edge-1",
				Alarmed: true, AlarmAt: time.Now().Add(time.Second).UTC(), Served: served})
			return err
		})
	}
	trained := func(job, version string) {
		t.Helper()
		put(func() error {
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
		put(func() error { _, err := cat.Rollouts.Put(r); return err })
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

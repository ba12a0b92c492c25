package httpapi

import (
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// TestUnplacedSaysWhy: a training job with no placement while no
// controller-capable agent is reachable says it waits for one, naming
// them; a service, or a job in a mesh whose controller is up, waits for
// its owner.
func TestUnplacedSaysWhy(t *testing.T) {
	t.Parallel()
	nodes := []mesh.Node{
		{NodeState: mesh.NodeState{Name: "cloud-1", Controller: true}, Status: mesh.StatusFailed},
		{NodeState: mesh.NodeState{Name: "edge-1"}, Status: mesh.StatusAlive},
	}
	if got := unplaced(policy.KindTrainingJob, nodes); !strings.Contains(got, "waiting for a controller-capable agent (cloud-1: none reachable)") {
		t.Errorf("training job: %q", got)
	}
	if got := unplaced(policy.KindInferenceService, nodes); got != "waiting for its owner to place it" {
		t.Errorf("service: %q", got)
	}
	nodes[0].Status = mesh.StatusAlive
	if got := unplaced(policy.KindTrainingJob, nodes); got != "waiting for its owner to place it" {
		t.Errorf("training job, controller up: %q", got)
	}
}

// TestSweepPlacementShowsItsExperiment: a sweep, never placed itself,
// reads as its experiment of the same generation (state and trials), and
// as pending only until its owner starts that experiment.
func TestSweepPlacementShowsItsExperiment(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	nodes := []mesh.Node{{NodeState: mesh.NodeState{Name: "cloud-1", Controller: true}, Status: mesh.StatusAlive}}
	p := catalog.Policy{Kind: policy.KindTrainingJob, Name: "tune", Generation: 2}
	if got := sweepPlacement(p, cat, nodes); got.State != catalog.StatePending {
		t.Errorf("no experiment yet: %s (%s), want pending", got.State, got.Message)
	}
	e := catalog.Experiment{Name: "tune", Key: p.Key(), Generation: 1, State: catalog.ExperimentFailed}
	if _, err := cat.Experiments.Put(e); err != nil {
		t.Fatal(err)
	}
	if got := sweepPlacement(p, cat, nodes); got.State != catalog.StatePending {
		t.Errorf("an earlier generation's experiment: %s (%s), want pending", got.State, got.Message)
	}
	e.Generation, e.State, e.Message = 2, catalog.ExperimentRunning, "best: tune-g2-trial-1"
	e.Trials = []catalog.Trial{{Job: "tune-g2-trial-1", State: catalog.JobSucceeded}, {Job: "tune-g2-trial-2", State: catalog.JobRunning}}
	if _, err := cat.Experiments.Put(e); err != nil {
		t.Fatal(err)
	}
	got := sweepPlacement(p, cat, nodes)
	if want := "experiment: 2 trials, 1 running, 1 succeeded; best: tune-g2-trial-1"; got.State != catalog.ExperimentRunning || got.Message != want {
		t.Errorf("running: %s (%s), want running (%s)", got.State, got.Message, want)
	}
}

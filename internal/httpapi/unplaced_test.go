package httpapi

import (
	"strings"
	"testing"

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

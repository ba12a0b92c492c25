package catalog_test

import (
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
)

// TestNextGenerationNeverRestarts: a policy applied anew after a delete
// gets a generation past every record its predecessors left.
func TestNextGenerationNeverRestarts(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := cat.NextGeneration("TrainingJob/train"); got != 1 {
		t.Errorf("new key: %d, want 1", got)
	}
	must(cat.Jobs.Put(catalog.Job{Name: "train", Key: "TrainingJob/train", Generation: 3, State: catalog.JobSucceeded}))
	must(cat.Jobs.Put(catalog.Job{Name: "other", Key: "TrainingJob/other", Generation: 9}))
	if got := cat.NextGeneration("TrainingJob/train"); got != 4 {
		t.Errorf("after a deleted job of generation 3: %d, want 4", got)
	}
	must(cat.Experiments.Put(catalog.Experiment{Name: "tune", Key: "TrainingJob/tune", Generation: 5, State: catalog.ExperimentDeleted}))
	if got := cat.NextGeneration("TrainingJob/tune"); got != 6 {
		t.Errorf("after a deleted sweep of generation 5: %d, want 6", got)
	}
	must(cat.Rollouts.Put(catalog.Rollout{Policy: "InferenceService/s", Generation: 2}))
	if got := cat.NextGeneration("InferenceService/s"); got != 3 {
		t.Errorf("after a deleted service's rollout of generation 2: %d, want 3", got)
	}
	must(cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "s", Generation: 7}))
	if got := cat.NextGeneration("InferenceService/s"); got != 8 {
		t.Errorf("live policy of generation 7: %d, want 8", got)
	}
}

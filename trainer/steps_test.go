package trainer_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/trainer"
)

// TestReadSteps: steps number themselves when they do not say, a line
// that is not an object of numbers is skipped and counted, a line still
// being written is not read, and a missing file is no steps.
func TestReadSteps(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), trainer.StepsFile)
	if steps, bad, err := trainer.ReadSteps(path); steps != nil || bad != 0 || err != nil {
		t.Fatalf("missing file: %v %d %v", steps, bad, err)
	}
	data := `{"step": 10, "accuracy": 0.5, "loss": 1.5}
epoch 2 done
{"accuracy": "high"}
{"loss": 1e999}

{"accuracy": 0.75}
{"step": 1.5, "loss": 1}
{}
{"accuracy": 0.9`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	steps, bad, err := trainer.ReadSteps(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []trainer.Step{
		{Step: 10, Metrics: map[string]float64{"accuracy": 0.5, "loss": 1.5}},
		{Step: 2, Metrics: map[string]float64{"accuracy": 0.75}},
	}
	if diff := cmp.Diff(want, steps); diff != "" || bad != 5 {
		t.Errorf("steps (-want +got):\n%s\nbad lines %d, want 5", diff, bad)
	}
}

package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/api"
)

// TestWriteExperiment: one search's table, the best trial marked.
func TestWriteExperiment(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	e := api.Experiment{
		Name: "tune", Algorithm: "grid", Metric: "accuracy", Goal: "maximize", State: "succeeded", Best: 1,
		Message: "best: tune-trial-2 with epochs=30 learningRate=0.1 (accuracy=0.985); registered tuned@1",
		Trials: []api.Trial{
			{Job: "tune-trial-1", Params: map[string]string{"learningRate": "0.0001", "epochs": "1"}, State: "succeeded", Value: 0.52, HasValue: true, Node: "gpu-1", Started: at, Finished: at.Add(150 * time.Millisecond)},
			{Job: "tune-trial-2", Params: map[string]string{"learningRate": "0.1", "epochs": "30"}, State: "succeeded", Value: 0.985, HasValue: true, Node: "gpu-2", Started: at, Finished: at.Add(900 * time.Millisecond)},
			{Job: "tune-trial-3", Params: map[string]string{"learningRate": "0.1", "epochs": "1"}, State: "failed", Error: "no holder of cases@1", Node: "gpu-1"},
			{Job: "tune-trial-4", Params: map[string]string{"learningRate": "0.0001", "epochs": "30"}, State: "running", Node: "gpu-2", Started: at},
		},
	}
	var buf bytes.Buffer
	writeExperiment(&buf, e)
	golden := "testdata/experiment.golden"
	if *updateGolden {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("experiment output (-golden +got):\n%s", diff)
	}
}

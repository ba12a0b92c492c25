package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/api"
)

// rising is a curve of n points climbing from 0.5 towards 1.
func rising(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1 - 0.5/float64(i+1)
	}
	return out
}

// TestWriteExperiment: one search's table, the best trial marked, curves
// drawn, a stopped trial with its best value so far and why.
func TestWriteExperiment(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	e := api.Experiment{
		Name: "tune", Algorithm: "grid", Metric: "accuracy", Goal: "maximize", State: "succeeded", Best: 1,
		Message: "best: tune-trial-2 with epochs=30 learningRate=0.1 (accuracy=0.985); registered tuned@1",
		Trials: []api.Trial{
			{Job: "tune-trial-1", Params: map[string]string{"learningRate": "0.0001", "epochs": "1"}, State: "succeeded", Value: 0.52, HasValue: true, Curve: []float64{0.31, 0.44, 0.52}, Node: "gpu-1", Started: at, Finished: at.Add(150 * time.Millisecond)},
			{Job: "tune-trial-2", Params: map[string]string{"learningRate": "0.1", "epochs": "30"}, State: "succeeded", Value: 0.985, HasValue: true, Curve: rising(30), Node: "gpu-2", Started: at, Finished: at.Add(900 * time.Millisecond)},
			{Job: "tune-trial-3", Params: map[string]string{"learningRate": "0.1", "epochs": "1"}, State: "failed", Error: "no holder of cases@1", Node: "gpu-1"},
			{Job: "tune-trial-4", Params: map[string]string{"learningRate": "0.0001", "epochs": "30"}, State: "running", Curve: []float64{0.5, 0.61}, Node: "gpu-2", Started: at},
			{Job: "tune-trial-5", Params: map[string]string{"learningRate": "0.0001", "epochs": "10"}, State: "stopped", Value: 0.41, Curve: []float64{0.2, 0.33, 0.41, 0.4, 0.41},
				Error: "stopped early at step 5: its best accuracy so far, 0.41, is worse than the median of 2 finished trials' running averages", Node: "gpu-1", Started: at, Finished: at.Add(2 * time.Second)},
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

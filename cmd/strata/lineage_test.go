package main

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/api"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// TestWriteLineage: the lineage table for a retrained version and the
// pushed version it came from.
func TestWriteLineage(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	chain := api.LineageChain{Chain: []api.LineageStep{
		{
			Model: api.ArtifactRef{Kind: "model", Name: "scorer", Version: "2", Digest: "2222222222222222222222"}, Created: at.Add(time.Minute),
			Lineage: &api.Lineage{
				Job: "scorer-retrain-1", Policy: "TrainingJob/scorer-retrain-1", Generation: 1, Launcher: "builtin",
				Params:  map[string]string{"algorithm": "logreg", "epochs": "10", "seed": "1", "holdout": "0.2", "learningRate": "0.01", "label": "y"},
				Data:    []api.ArtifactRef{{Kind: "dataset", Name: "cases", Version: "3", Digest: "cccccccccccccccccccc"}},
				Metrics: map[string]float64{"accuracy": 0.9375, "loss": 0.21, "train_rows": 320, "holdout_rows": 80},
				Parent:  &api.ArtifactRef{Kind: "model", Name: "scorer", Version: "1", Digest: "1111111111111111111111"}, RetrainOf: "scorer",
				Trigger: &api.DriftTrigger{Site: "edge-a", Node: "edge-a-1", Version: "1", Samples: 431, Feature: "a", Statistic: 0.42, Detector: "psi"},
				Nodes:   []string{"gpu-1"}, Started: at.Add(50 * time.Second), Finished: at.Add(52 * time.Second),
			},
			Served: []api.LineageServed{{Policy: "InferenceService/scorer", Node: "edge-a-1", Site: "edge-a", State: "serving"}},
		},
		{
			Model: api.ArtifactRef{Kind: "model", Name: "scorer", Version: "1", Digest: "1111111111111111111111"}, Created: at,
			Children: []api.ArtifactRef{{Kind: "model", Name: "scorer", Version: "2"}},
		},
	}}
	var buf bytes.Buffer
	writeLineage(&buf, chain, time.UTC)
	golden := "testdata/lineage.golden"
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
		t.Errorf("lineage output (-golden +got):\n%s", diff)
	}
}

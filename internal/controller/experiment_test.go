package controller

import (
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
)

// TestTrialSource: a trial is the sweep's job without its sweep, with the
// parameters in its builtin block (or, for exec, its environment), and
// only the final job keeps the labels that register a model.
func TestTrialSource(t *testing.T) {
	t.Parallel()
	builtin := `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune, labels: {strata.io/output-model: m, team: a}}
spec:
  data: [{dataset: d}]
  builtin: {algorithm: mlp, label: y}
  sweep:
    parameters:
      - {name: hidden, values: ["[8, 8]", "[32]"]}
      - {name: learningRate, min: 0.001, max: 1, scale: log}
`
	exec := `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune}
spec:
  command: [python3, train.py]
  sweep:
    parameters:
      - {name: dropout, min: 0, max: 0.5}
`
	for _, c := range []struct {
		name, src string
		params    map[string]string
		final     bool
		want      []string
		not       []string
	}{
		{"trial", builtin, map[string]string{"hidden": "[8, 8]", "learningRate": "0.01"}, false,
			[]string{"name: tune-trial-1", "strata.io/trial-of: tune", "team: a", "hidden: [8, 8]", "learningRate: 0.01", "algorithm: mlp"},
			[]string{"sweep", "output-model"}},
		{"final", builtin, map[string]string{"hidden": "[32]", "learningRate": "0.5"}, true,
			[]string{"strata.io/output-model: m", "hidden: [32]", "learningRate: 0.5"}, []string{"sweep"}},
		{"exec", exec, map[string]string{"dropout": "0.25"}, false,
			[]string{"STRATA_PARAM_DROPOUT: \"0.25\"", "command: [python3, train.py]"}, []string{"sweep"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := catalog.Policy{Kind: "TrainingJob", Name: "tune", Source: c.src, Generation: 1}
			if !IsSweep(p) {
				t.Fatal("not seen as a sweep")
			}
			src, err := trialSource(p, "tune-trial-1", c.params, c.final)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(src, w) {
					t.Errorf("source lacks %q:\n%s", w, src)
				}
			}
			for _, n := range c.not {
				if strings.Contains(src, n) {
					t.Errorf("source has %q:\n%s", n, src)
				}
			}
			if IsSweep(catalog.Policy{Kind: "TrainingJob", Name: "tune-trial-1", Source: src}) {
				t.Error("a trial is itself a sweep")
			}
		})
	}
}

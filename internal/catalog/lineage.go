package catalog

import (
	"encoding/json"
	"fmt"
	"time"
)

// MetaLineage holds, in a trained model version's signed manifest, the
// JSON of its Lineage: what made it.
const MetaLineage = "strata.lineage"

// Lineage is what made a model version: the job and policy, the
// parameters, the data read, the metrics, and the model it retrained. It
// is written once, when the job registers the model, into the version's
// signed manifest (MetaLineage), so it travels and is verified with it.
type Lineage struct {
	// Job is the training job; Policy its TrainingJob key and Generation
	// the policy generation run.
	Job        string `json:"job"`
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// Launcher is builtin, exec or torchrun. Params are the builtin
	// trainer's settings (algorithm, hidden, epochs, learningRate,
	// holdout, seed, label); Command is the exec launcher's command and
	// arguments (torchrun's: the script and its arguments).
	Launcher string            `json:"launcher"`
	Params   map[string]string `json:"params,omitempty"`
	Command  []string          `json:"command,omitempty"`
	// Data are the dataset (or artifact) versions the job read.
	Data []ArtifactRef `json:"data,omitempty"`
	// Code is the code artifact the job ran, if it named one.
	Code *ArtifactRef `json:"code,omitempty"`
	// Metrics are the trainer's reported figures (accuracy,
	// train_accuracy, loss, train_rows, holdout_rows).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Parent is the model version a retrain started from; RetrainOf the
	// InferenceService whose drift started it.
	Parent    *ArtifactRef `json:"parent,omitempty"`
	RetrainOf string       `json:"retrain_of,omitempty"`
	// Trigger is the drift alarm that started the retrain.
	Trigger *DriftTrigger `json:"trigger,omitempty"`
	// Nodes ran the job, rank 0 first.
	Nodes    []string  `json:"nodes"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished"`
}

// ArtifactRef names one version of a model or dataset and its bytes.
type ArtifactRef struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// String is "name@version".
func (r ArtifactRef) String() string { return r.Name + "@" + r.Version }

// LineageOf decodes a manifest's MetaLineage; ok is false when the
// version carries none (it was pushed, not trained here).
func LineageOf(meta map[string]string) (l Lineage, ok bool, err error) {
	s, has := meta[MetaLineage]
	if !has {
		return Lineage{}, false, nil
	}
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return Lineage{}, false, fmt.Errorf("%s: %w", MetaLineage, err)
	}
	return l, true, nil
}

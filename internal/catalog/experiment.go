package catalog

import "time"

// Experiment states (and trial states: a trial is a training job, so it
// also reads pending, running, succeeded or failed).
const (
	ExperimentRunning = "running"
	// ExperimentTraining: the search ended and the best trial's
	// parameters are training the model it registers.
	ExperimentTraining  = "training"
	ExperimentSucceeded = "succeeded"
	ExperimentFailed    = "failed"
	// ExperimentDeleted: its sweep was deleted. The record stays (its
	// Generation keeps a sweep applied again under the name from reusing
	// its trials' names and results) until a new sweep of the name
	// replaces it.
	ExperimentDeleted = "deleted"
)

// LabelTrialOf marks a TrainingJob that is a trial (or the final
// training) of an experiment.
const LabelTrialOf = "strata.io/trial-of"

// Experiment is a hyperparameter search: a TrainingJob with a sweep,
// run by its owning controller as trial TrainingJobs. Name is the
// TrainingJob's name.
type Experiment struct {
	Name       string `json:"name"`
	Key        string `json:"key"`
	Generation uint64 `json:"generation"`
	Algorithm  string `json:"algorithm"`
	Metric     string `json:"metric"`
	Goal       string `json:"goal"`
	State      string `json:"state"`
	Message    string `json:"message,omitempty"`
	// Trials in the order they were proposed.
	Trials []Trial `json:"trials"`
	// Best is the index in Trials of the best succeeded trial, -1 when
	// none.
	Best int `json:"best"`
	// Final is the job that trains the registered model with the best
	// trial's parameters; Model and Version what it registered.
	Final   string    `json:"final,omitempty"`
	Model   string    `json:"model,omitempty"`
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started"`
	// Finished is when the experiment ended.
	Finished time.Time `json:"finished,omitzero"`
}

// Trial is one point of a search, run as a TrainingJob.
type Trial struct {
	Job    string            `json:"job"`
	Params map[string]string `json:"params"`
	// Point is the proposal in the algorithm's coordinates.
	Point []float64 `json:"point"`
	// State is the trial's job's, or TrialStopped.
	State string `json:"state"`
	// Value is the objective's value, when HasValue.
	Value    float64 `json:"value"`
	HasValue bool    `json:"has_value"`
	// Curve is the objective per step, as the trial reported it.
	Curve    []float64          `json:"curve,omitempty"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	Node     string             `json:"node,omitempty"`
	Error    string             `json:"error,omitempty"`
	Started  time.Time          `json:"started,omitzero"`
	Finished time.Time          `json:"finished,omitzero"`
}

// TrialStopped is the state of a trial that early stopping ended.
const TrialStopped = "stopped"

// Ended says the experiment will start no more jobs.
func (e Experiment) Ended() bool {
	return e.State == ExperimentSucceeded || e.State == ExperimentFailed || e.State == ExperimentDeleted
}

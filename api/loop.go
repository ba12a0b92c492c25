package api

import (
	"encoding/json"
	"time"
)

// Artifact kinds.
const (
	KindModel   = "model"
	KindDataset = "dataset"
	KindCode    = "code"
)

// Manifest names a signed model or dataset version and its bytes (the
// answer of POST /v1/artifacts).
type Manifest struct {
	// Kind is model or dataset.
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Digest is the SHA-256 of the bytes, hex.
	Digest string `json:"digest"`
	// Size is the blob's size in bytes; ChunkSize that of every chunk but
	// the last.
	Size      int64     `json:"size"`
	ChunkSize int64     `json:"chunk_size"`
	Chunks    []string  `json:"chunks"`
	Created   time.Time `json:"created"`
	// Metadata rides along signed (a model's drift reference, ...).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Signer is the signing key's fingerprint; Signature the ed25519
	// signature.
	Signer    string `json:"signer"`
	Signature []byte `json:"signature"`
}

// Ref names the version as kind/name@version.
func (m Manifest) Ref() string { return m.Kind + "/" + m.Name + "@" + m.Version }

// Artifact is a manifest with the nodes that hold its bytes (GET
// /v1/artifacts).
type Artifact struct {
	Manifest
	// Holders are the live nodes that hold the bytes.
	Holders []string `json:"holders"`
	// Pulling are the nodes downloading it now.
	Pulling []string `json:"pulling,omitempty"`
}

// Model is one model with its versions, newest first (GET /v1/models).
type Model struct {
	Name     string     `json:"name"`
	Versions []Artifact `json:"versions"`
}

// Transfer states.
const (
	TransferRunning = "running"
	TransferDone    = "done"
	TransferFailed  = "failed"
)

// TransferStatus is a snapshot of one pull (GET /v1/transfers, POST
// /v1/artifacts/pull).
type TransferStatus struct {
	// Digest and Ref name the blob and its manifest (kind/name@version).
	Digest string `json:"digest"`
	Ref    string `json:"ref"`
	// BytesDone counts verified bytes, including Resumed; BytesTotal is
	// the blob's size.
	BytesDone  int64 `json:"bytes_done"`
	BytesTotal int64 `json:"bytes_total"`
	// Resumed counts bytes found verified from an earlier attempt.
	Resumed int64 `json:"resumed"`
	// Fetched counts chunk bytes received in this attempt.
	Fetched int64 `json:"fetched"`
	// RateBytesPerSec is the mean receive rate of this attempt.
	RateBytesPerSec float64 `json:"rate_bytes_per_sec"`
	// Started is when this attempt began; Elapsed how long it has run.
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Sources lists the holders and what each gave.
	Sources []TransferSource `json:"sources"`
	// State is running, done or failed; Error says why a pull failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// TransferSource is one holder of a pull and what it gave.
type TransferSource struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Bytes and Chunks count verified chunks fetched from it.
	Bytes  int64 `json:"bytes"`
	Chunks int   `json:"chunks"`
	// Rejected counts chunks from it that failed their digest.
	Rejected int `json:"rejected"`
	// Failures counts requests to it that failed.
	Failures int `json:"failures"`
	// State is active, rejected or unreachable.
	State string `json:"state"`
}

// Job states.
const (
	JobPending   = "pending"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
)

// JobStep is one step of a job's per-step metrics.
type JobStep struct {
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// Job is one training job's run (GET /v1/jobs, GET /v1/jobs/{name}).
type Job struct {
	Name string `json:"name"`
	// Key is the TrainingJob policy's key.
	Key string `json:"key"`
	// Generation and Epoch are the policy generation and placement epoch
	// run.
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
	State      string `json:"state"`
	Launcher   string `json:"launcher"`
	// Nodes are the gang's members by rank; Node runs rank 0 and keeps
	// the logs.
	Nodes []string `json:"nodes"`
	Node  string   `json:"node"`
	// RetrainOf is the InferenceService this job retrains, if any.
	RetrainOf string `json:"retrain_of,omitempty"`
	// Model and Version name the model the job registered; Digest its
	// bytes; Accuracy the holdout accuracy when known.
	Model    string  `json:"model,omitempty"`
	Version  string  `json:"version,omitempty"`
	Digest   string  `json:"digest,omitempty"`
	Accuracy float64 `json:"accuracy,omitempty"`
	// Metrics are the numbers the job reported in its metrics.json;
	// Invalid those that were not finite (NaN, Infinity), by name.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Invalid map[string]string  `json:"invalid_metrics,omitempty"`
	// Steps are the metrics rank 0 reported per step
	// ($STRATA_METRICS_FILE), as the job went.
	Steps []JobStep `json:"steps,omitempty"`
	// Data are the dataset versions the job reads, resolved when it
	// started.
	Data []ArtifactRef `json:"data,omitempty"`
	// Code is the code artifact the job runs, resolved when it started.
	Code *ArtifactRef `json:"code,omitempty"`
	// Members are the launcher's per-rank states.
	Members  []JobMember `json:"members,omitempty"`
	Attempt  int         `json:"attempt,omitempty"`
	Error    string      `json:"error,omitempty"`
	Created  time.Time   `json:"created"`
	Started  time.Time   `json:"started,omitzero"`
	Finished time.Time   `json:"finished,omitzero"`
}

// Terminal says the job has ended.
func (j Job) Terminal() bool { return j.State == JobSucceeded || j.State == JobFailed }

// JobMember is one gang member's state.
type JobMember struct {
	Rank  int    `json:"rank"`
	Node  string `json:"node"`
	State string `json:"state"`
	// ExitCode is the process's exit status; -1 while running, when it
	// was killed by a signal, or when it never started.
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// Drift is one node's drift monitor for one policy's model (GET
// /v1/drift).
type Drift struct {
	Policy  string `json:"policy"`
	Model   string `json:"model"`
	Version string `json:"version"`
	Site    string `json:"site"`
	Node    string `json:"node"`
	// Detector (psi, ks, wasserstein, ...), Threshold and Window are the
	// monitor's settings.
	Detector  string  `json:"detector"`
	Threshold float64 `json:"threshold"`
	Window    int     `json:"window"`
	// Reference is "training" or "first"; Ready is false while "first" is
	// still collecting.
	Reference string `json:"reference"`
	Ready     bool   `json:"ready"`
	// ReferenceSite is set when the training reference is the model's
	// reference for this site: it was retrained on the site's captured
	// rows.
	ReferenceSite string `json:"reference_site,omitempty"`
	// State is warming (not yet enough rows to judge: no alarm does not
	// mean no drift), ok, alarm or error; empty from agents before it
	// (see Status).
	State string `json:"state,omitempty"`
	// Seen counts the samples observed by this version's monitor.
	Seen int64 `json:"seen"`
	// Alarmed is the hysteresis state; AlarmSeen and AlarmAt say when the
	// current alarm fired.
	Alarmed   bool      `json:"alarmed"`
	AlarmSeen int64     `json:"alarm_seen,omitempty"`
	AlarmAt   time.Time `json:"alarm_at,omitzero"`
	// AlarmSource is the detector that raised the current alarm: "stream"
	// (per row) or "window"; only it clears the alarm. AlarmFeature is the
	// feature it fired on and AlarmStatistic its statistic as it crossed
	// (for a streaming alarm over its threshold, above 1; for a windowed
	// one the detector's figure); AlarmDrifted every feature that alarmed
	// with it.
	AlarmSource    string   `json:"alarm_source,omitempty"`
	AlarmFeature   string   `json:"alarm_feature,omitempty"`
	AlarmStatistic float64  `json:"alarm_statistic,omitempty"`
	AlarmDrifted   []string `json:"alarm_drifted,omitempty"`
	// Capture is the ground truth kept on the node for a retrain that
	// trains on the drifted site's rows (retrain.capture).
	Capture *DriftCapture `json:"capture,omitempty"`
	// Stream is the streaming detector's state per input feature.
	Stream []DriftStream `json:"stream,omitempty"`
	// Scores are the latest evaluation's, per feature then the prediction.
	Scores []DriftScore `json:"scores,omitempty"`
	// History is the worst score of recent evaluations, oldest first.
	History []DriftPoint `json:"history,omitempty"`
	// Served and Failed count the version's requests on the node.
	Served uint64 `json:"served"`
	Failed uint64 `json:"failed"`
	// Dropped counts sampled rows the monitor could not keep up with.
	Dropped uint64 `json:"dropped,omitempty"`
	// Invalid counts the version's rows dropped because a watched value
	// was NaN or infinite (the monitor goes on).
	Invalid uint64 `json:"invalid,omitempty"`
	// Error says why the monitor cannot run.
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// DriftCapture is a drifted site's labelled live rows kept for a retrain,
// from the alarm at AlarmAt on.
type DriftCapture struct {
	AlarmAt time.Time `json:"alarm_at"`
	// Rows are the labelled rows kept so far; Want the rows the retrain
	// waits for.
	Rows int `json:"rows"`
	Want int `json:"want"`
	// Dataset is the published capture, "name:version".
	Dataset string `json:"dataset,omitempty"`
	// Error says why the capture could not be published.
	Error string `json:"error,omitempty"`
}

// FeedbackRequest is ground truth for a model's inputs (POST
// /v1/models/{name}/feedback): Inputs are rows of the model's inputs in
// its input order, Labels their true classes (numbers or names).
type FeedbackRequest struct {
	Inputs [][]float64       `json:"inputs"`
	Labels []json.RawMessage `json:"labels"`
}

// FeedbackResult says what the agent kept of posted ground truth.
type FeedbackResult struct {
	// Accepted is the rows kept for a capture.
	Accepted int `json:"accepted"`
	// Capturing says a capture is under way on the node; Rows and Want
	// are its rows so far and the rows its retrain waits for; Dataset
	// names the capture once published.
	Capturing bool   `json:"capturing"`
	Rows      int    `json:"rows,omitempty"`
	Want      int    `json:"want,omitempty"`
	Dataset   string `json:"dataset,omitempty"`
	// Reason says why rows were not kept.
	Reason string `json:"reason,omitempty"`
}

// DriftStream is the streaming detector (a CUSUM) on one feature.
type DriftStream struct {
	Name string `json:"name"`
	// Upper and Lower are the CUSUM statistics for an upward and a
	// downward shift; an alarm fires when one passes Threshold.
	Upper     float64 `json:"upper"`
	Lower     float64 `json:"lower"`
	Threshold float64 `json:"threshold"`
	// Spread is the variance side's statistic, SpreadThreshold its
	// threshold (both 0 when it is off).
	Spread          float64 `json:"spread,omitempty"`
	SpreadThreshold float64 `json:"spread_threshold,omitempty"`
	// Alarms counts the feature's alarms; LastAlarm is the sample count at
	// the latest; Side is up, down or spread.
	Alarms    int64  `json:"alarms,omitempty"`
	LastAlarm int64  `json:"last_alarm,omitempty"`
	Side      string `json:"side,omitempty"`
	// AlarmStatistic is the latest alarm's statistic over its threshold
	// as it crossed (the side restarts from 0 then).
	AlarmStatistic float64 `json:"alarm_statistic,omitempty"`
	// Holding says a side that alarmed has not yet decayed back to 0:
	// the streaming alarm holds.
	Holding bool `json:"holding,omitempty"`
	// Drifted says it alarmed since the last windowed evaluation.
	Drifted bool `json:"drifted"`
}

// DriftScore is one feature's score in an evaluation.
type DriftScore struct {
	// Name is the feature's name ("prediction" for the score).
	Name string `json:"name"`
	// Statistic is PSI, the KS D, or the Wasserstein-1 distance, per the
	// detector.
	Statistic float64 `json:"statistic"`
	// PValue is the corrected KS p-value (KS only; 1 otherwise).
	PValue  float64 `json:"p_value"`
	Drifted bool    `json:"drifted"`
}

// DriftPoint is one evaluation in a Drift's history.
type DriftPoint struct {
	Time time.Time `json:"time"`
	Seen int64     `json:"seen"`
	// Feature is the worst feature; Statistic its score (the corrected
	// p-value for KS).
	Feature   string  `json:"feature"`
	Statistic float64 `json:"statistic"`
	Drifted   bool    `json:"drifted"`
}

// Event is one step of the control loop (GET /v1/events, a
// server-sent-event stream).
type Event struct {
	// Seq orders the answering agent's events; a client resumes after it.
	Seq uint64 `json:"seq"`
	// Time is when the step happened, by the clock of the agent that
	// wrote it.
	Time time.Time `json:"time"`
	// Type is "placement", "drift", "job" or "rollout", a dot and the new
	// state ("rollout.canary", "drift.alarm"). Drift events are
	// drift.warming, drift.ok, drift.alarm, drift.clear and drift.error,
	// one per transition of a node's monitor.
	Type    string `json:"type"`
	Policy  string `json:"policy,omitempty"`
	Node    string `json:"node,omitempty"`
	Message string `json:"message"`
	// Count is how many times the event happened in a row (1: once):
	// the same Type and Message again for the same Policy and Node is
	// counted, not kept twice. First and Last are the times of the first
	// and the latest occurrence; Time is Last. Agents before counting
	// send none of these (Count 0 means once).
	Count int       `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Replaces, on a repeat, is the Seq the event was sent with before:
	// a stream sends each repeat again as an update, with a new Seq, and
	// a follower replaces the event it showed as Replaces with this one.
	Replaces uint64 `json:"replaces,omitempty"`
}

// Status is the monitor's state, also for a record of an agent that
// wrote none: error, alarm, else ok.
func (d Drift) Status() string {
	switch {
	case d.State != "":
		return d.State
	case d.Error != "":
		return "error"
	case d.Alarmed:
		return "alarm"
	}
	return "ok"
}

// Times is how many times the event happened, at least 1.
func (e Event) Times() int { return max(e.Count, 1) }

// ArtifactRef names one version of a model or dataset and its bytes.
type ArtifactRef struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// Lineage is what made a trained model version (GET /v1/lineage): the
// job and policy, parameters, data read, metrics and the version it
// retrained.
type Lineage struct {
	Job        string             `json:"job"`
	Policy     string             `json:"policy"`
	Generation uint64             `json:"generation"`
	Launcher   string             `json:"launcher"`
	Params     map[string]string  `json:"params,omitempty"`
	Command    []string           `json:"command,omitempty"`
	Data       []ArtifactRef      `json:"data,omitempty"`
	Code       *ArtifactRef       `json:"code,omitempty"`
	Metrics    map[string]float64 `json:"metrics,omitempty"`
	Parent     *ArtifactRef       `json:"parent,omitempty"`
	RetrainOf  string             `json:"retrain_of,omitempty"`
	Trigger    *DriftTrigger      `json:"trigger,omitempty"`
	Nodes      []string           `json:"nodes"`
	Started    time.Time          `json:"started,omitzero"`
	Finished   time.Time          `json:"finished"`
}

// LineageStep is one model version of a lineage chain: what made it
// (nil Lineage: pushed, not trained in the mesh), where it is served and the versions retrained from it.
type LineageStep struct {
	Model    ArtifactRef     `json:"model"`
	Created  time.Time       `json:"created"`
	Signer   string          `json:"signer"`
	Lineage  *Lineage        `json:"lineage,omitempty"`
	Served   []LineageServed `json:"served,omitempty"`
	Children []ArtifactRef   `json:"children,omitempty"`
}

// LineageServed is one node serving (or loading) a model version.
type LineageServed struct {
	Policy string `json:"policy"`
	Node   string `json:"node"`
	Site   string `json:"site"`
	State  string `json:"state"`
}

// LineageChain is a model version's lineage, newest first: the asked
// version, then the version it was retrained from, back to one that was
// pushed or whose parent is unknown.
type LineageChain struct {
	Chain []LineageStep `json:"chain"`
}

// Experiment is a hyperparameter search (GET /v1/experiments): a
// TrainingJob with a sweep, run as trial TrainingJobs.
type Experiment struct {
	Name       string `json:"name"`
	Key        string `json:"key"`
	Generation uint64 `json:"generation"`
	Algorithm  string `json:"algorithm"`
	Metric     string `json:"metric"`
	Goal       string `json:"goal"`
	// State is running, training (the best parameters train the model
	// it registers), succeeded or failed.
	State   string  `json:"state"`
	Message string  `json:"message,omitempty"`
	Trials  []Trial `json:"trials"`
	// Best indexes Trials, -1 when no trial succeeded.
	Best     int       `json:"best"`
	Final    string    `json:"final,omitempty"`
	Model    string    `json:"model,omitempty"`
	Version  string    `json:"version,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
}

// Trial is one point of a search, run as a training job.
type Trial struct {
	Job    string            `json:"job"`
	Params map[string]string `json:"params"`
	Point  []float64         `json:"point"`
	// State is a job's, or "stopped" when early stopping ended it.
	State    string  `json:"state"`
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

// WhatIfOutcome is what a what-if does to one policy (POST /v1/sim).
type WhatIfOutcome struct {
	Policy string `json:"policy"`
	// Status is "moves", "becomes infeasible", "becomes feasible",
	// "stays infeasible" or "unchanged".
	Status string   `json:"status"`
	Before []string `json:"before"`
	After  []string `json:"after"`
	Why    string   `json:"why,omitempty"`
}

// WhatIfReport is the answer of GET or POST /v1/sim: every applied policy
// planned on the mesh as it is and with the changes.
type WhatIfReport struct {
	Changes  []string        `json:"changes"`
	Policies int             `json:"policies"`
	Outcomes []WhatIfOutcome `json:"outcomes"`
	Elapsed  time.Duration   `json:"elapsed_ns"`
}

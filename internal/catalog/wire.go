package catalog

// The types below are parts of records that other packages compute: the
// catalog owns their JSON (testdata/wire.golden pins it), so that a change
// to a domain type does not change what agents of other versions read.
// The packages that write them convert (meshview for placement,
// driftwatch for infer/drift, jobs for trainer).

// Reason is why the placement engine filtered a node out
// (placement.Reason's values: "insufficient_cpu", "latency_slo", …).
type Reason string

// Fallback is a placement group that fell short of its preferred tier
// (placement.Fallback).
type Fallback struct {
	// Client is the client site of a per-client-site group, else "".
	Client string `json:"client,omitempty"`
	// Tier is the tier that fell short.
	Tier string `json:"tier"`
	// Reason is the main reason it fell short.
	Reason Reason `json:"reason"`
	// Message says it for people.
	Message string `json:"message"`
}

// Resources is what each placed replica or gang member holds on its node
// (placement.Resources, which converts to and from it).
type Resources struct {
	// CPU in millicores.
	CPU int64 `json:"cpu,omitempty"`
	// Memory in bytes.
	Memory int64 `json:"memory,omitempty"`
	// GPUs is the number of whole GPUs.
	GPUs int `json:"gpus,omitempty"`
	// GPUModel, when set, is matched case-insensitively as a substring of
	// a GPU's model name.
	GPUModel string `json:"gpu_model,omitempty"`
	// GPUMemory is the least memory in bytes each GPU must have.
	GPUMemory int64 `json:"gpu_memory,omitempty"`
}

// Score is one feature's (or the prediction's) score in a drift
// monitor's latest windowed evaluation (drift.Score).
type Score struct {
	// Name is the feature's name ("prediction" for the score).
	Name string `json:"name"`
	// Statistic is PSI, the KS D, or the Wasserstein-1 distance in
	// reference standard deviations, per the detector.
	Statistic float64 `json:"statistic"`
	// PValue is the corrected KS p-value (KS only; 1 otherwise).
	PValue float64 `json:"p_value"`
	// Drifted says the feature crossed the alarm threshold.
	Drifted bool `json:"drifted"`
}

// StreamScore is one feature's streaming (CUSUM) detector state
// (drift.StreamScore).
type StreamScore struct {
	// Name is the feature's name ("prediction" for the score).
	Name string `json:"name"`
	// Upper and Lower are the CUSUM statistics S⁺ and S⁻, in
	// standardized units; an alarm fires when one exceeds Threshold.
	Upper     float64 `json:"upper"`
	Lower     float64 `json:"lower"`
	Threshold float64 `json:"threshold"`
	// Spread is the spread side's statistic and SpreadThreshold its
	// threshold; both 0 when the side is off.
	Spread          float64 `json:"spread,omitempty"`
	SpreadThreshold float64 `json:"spread_threshold,omitempty"`
	// Alarms counts the feature's streaming alarms so far; LastAlarm is
	// the monitor's Seen count at the latest, 0 if none.
	Alarms    int64 `json:"alarms,omitempty"`
	LastAlarm int64 `json:"last_alarm,omitempty"`
	// Side says which side raised the latest alarm (drift.Side's
	// values); "" before any.
	Side string `json:"side,omitempty"`
	// AlarmStatistic is the statistic that raised the latest alarm over
	// its threshold, as it crossed (above 1; 0 before any alarm).
	AlarmStatistic float64 `json:"alarm_statistic,omitempty"`
	// Holding says a side that alarmed is still held.
	Holding bool `json:"holding,omitempty"`
	// Drifted says the feature alarmed since the monitor's last windowed
	// evaluation (or since it started, before the first).
	Drifted bool `json:"drifted"`
}

// Values of the drift monitor's vocabulary that the catalog's own
// methods judge by (infer/drift's DetectorKS and SourceStream).
const (
	// detectorKS is Drift.Detector for the Kolmogorov–Smirnov test,
	// whose scores are judged by their p-value.
	detectorKS = "ks"
	// sourceStream is Drift.AlarmSource of the streaming detector.
	sourceStream = "stream"
)

// Step is the metrics a training job's rank 0 reported for one step
// (trainer.Step, which converts to and from it).
type Step struct {
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// MemberStatus is one rank's state in a training job's current attempt
// (trainer.MemberStatus).
type MemberStatus struct {
	// Rank is the member's index in the gang.
	Rank int `json:"rank"`
	// Node is the member's node.
	Node string `json:"node"`
	// State is JobPending, JobRunning, JobSucceeded or JobFailed.
	State string `json:"state"`
	// ExitCode is the process's exit status; -1 while running, when it
	// was killed by a signal, or when it never started.
	ExitCode int `json:"exit_code"`
	// Error says why the member failed, empty otherwise.
	Error string `json:"error,omitempty"`
}

// Rank is one rank of a training gang and where it runs (trainer.Member,
// which converts to and from it).
type Rank struct {
	// Node is the ID of the node the rank runs on.
	Node string `json:"node"`
	// Addr is the node's address, MASTER_ADDR for rank 0.
	Addr string `json:"addr,omitempty"`
	// GPUs are the GPU indices on the node it is given.
	GPUs []int `json:"gpus,omitempty"`
}

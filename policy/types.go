package policy

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"
)

// APIVersion is the only policy API version.
const APIVersion = "strata/v1"

// Kinds of policy document.
const (
	KindInferenceService = "InferenceService"
	KindTrainingJob      = "TrainingJob"
)

// Tiers a node can be in.
const (
	TierEdge   = "edge"
	TierOnPrem = "onprem"
	TierCloud  = "cloud"
)

// DefaultInferenceTiers is an InferenceService's default tier preference:
// as close to the clients as possible.
var DefaultInferenceTiers = []string{TierEdge, TierOnPrem, TierCloud}

// DefaultTrainingTiers is where a TrainingJob's gang goes by default: where
// the GPUs and fabrics are.
var DefaultTrainingTiers = []string{TierOnPrem, TierCloud}

// Spread domains of an InferenceService.
const (
	SpreadSite   = "site"
	SpreadRegion = "region"
)

// Rollout strategies.
const (
	RolloutCanary = "canary"
	RolloutAll    = "all"
)

// Drift detectors and references.
const (
	DetectorPSI         = "psi"
	DetectorKS          = "ks"
	DetectorWasserstein = "wasserstein"
	ReferenceTraining   = "training"
	ReferenceFirst      = "first"
)

// DefaultDriftThreshold is each detector's default alarm level: a PSI of
// 0.2 (the usual "significant shift"), a KS p-value of 0.001 (after correction across
// features, and evaluations overlap: a looser level alarms falsely), a Wasserstein
// distance of 0.3 reference standard deviations.
var DefaultDriftThreshold = map[string]float64{DetectorPSI: 0.2, DetectorKS: 0.001, DetectorWasserstein: 0.3}

// Gang fabric rules.
const (
	FabricSame = "same"
	FabricAny  = "any"
)

// Training launchers and built-in algorithms.
const (
	LauncherExec     = "exec"
	LauncherTorchrun = "torchrun"
	LauncherBuiltin  = "builtin"
	AlgorithmLogReg  = "logreg"
	AlgorithmMLP     = "mlp"
)

// Document is one policy document. From Parse it is validated, defaulted
// and compiled; one built in code goes through Validate and SetDefaults.
// Exactly one of InferenceService and TrainingJob is set, as Kind says, so
// a switch on which is non-nil is exhaustive. A parsed Document is safe
// for concurrent reads.
type Document struct {
	// APIVersion is always APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is KindInferenceService or KindTrainingJob.
	Kind string `json:"kind"`
	// Metadata names the document.
	Metadata Metadata `json:"metadata"`
	// InferenceService is the spec of an InferenceService, else nil.
	InferenceService *InferenceServiceSpec `json:"inferenceService,omitempty"`
	// TrainingJob is the spec of a TrainingJob, else nil.
	TrainingJob *TrainingJobSpec `json:"trainingJob,omitempty"`
	// File and Pos say where the document starts.
	File string   `json:"-"`
	Pos  Position `json:"-"`
	// Source is the document's own YAML, to store and re-parse.
	Source string `json:"-"`

	// pos maps each field path the file wrote (with a non-null value) to
	// the position of its value; nil for a document built in code.
	pos map[string]Position
}

// Wrote says whether the document's YAML wrote the field at path (such
// as "spec.gang.ranksPerNode") with a non-null value.
func (d *Document) Wrote(path string) bool {
	_, ok := d.pos[path]
	return ok
}

// MarshalJSON is the canonical JSON form of a document, shaped like the
// YAML (apiVersion, kind, metadata, spec) with every default filled in and
// units normalised: CPU in millicores, bytes as integers, durations as Go
// writes them, expressions as their source.
func (d *Document) MarshalJSON() ([]byte, error) {
	var spec any
	switch {
	case d.InferenceService != nil:
		spec = d.InferenceService
	case d.TrainingJob != nil:
		spec = d.TrainingJob
	}
	return marshalPlain(struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   Metadata `json:"metadata"`
		Spec       any      `json:"spec"`
	}{d.APIVersion, d.Kind, d.Metadata, spec})
}

// Key is the document's identity: "Kind/name".
func (d *Document) Key() string { return Key(d.Kind, d.Metadata.Name) }

// Key builds a policy identity from a kind and a name.
func Key(kind, name string) string { return kind + "/" + name }

// Metadata names and labels a document.
type Metadata struct {
	// Name is unique per kind: lower-case letters, digits and '-', at most
	// 63 characters, starting with a letter.
	Name string `yaml:"name" json:"name"`
	// Labels are free-form.
	Labels map[string]string `yaml:"labels" json:"labels,omitempty"`
}

// InferenceServiceSpec says what model to serve, how many replicas, with
// what resources and where: close to its clients within a latency SLO,
// in tier-preference order.
type InferenceServiceSpec struct {
	// Model is the model version to serve.
	Model ModelRef `yaml:"model" json:"model"`
	// Replicas is the number of replicas (per client site when
	// PerClientSite). Default 1.
	Replicas int `yaml:"replicas" json:"replicas"`
	// PerClientSite serves Replicas in each client site of Latency.Clients,
	// each on the best node for that site.
	PerClientSite bool `yaml:"perClientSite" json:"perClientSite,omitempty"`
	// Resources is what one replica needs.
	Resources Resources `yaml:"resources" json:"resources"`
	// Latency is the RTT SLO from the clients.
	Latency *Latency `yaml:"latency" json:"latency,omitempty"`
	// Tiers is the preference order; placement falls back to the next tier
	// only for what the previous cannot hold. Default [edge, onprem, cloud].
	Tiers []string `yaml:"tiers" json:"tiers"`
	// Spread puts at most one replica per site or region ("site",
	// "region"); empty lets replicas share a site.
	Spread string `yaml:"spread" json:"spread,omitempty"`
	// Constraints are hard requirements, CEL expressions over `node`.
	Constraints []*Expr `yaml:"constraints" json:"constraints,omitempty"`
	// Affinities are weighted preferences.
	Affinities []Affinity `yaml:"affinities" json:"affinities,omitempty"`
	// Prestage pulls the model, ahead of any failure, to each replica's
	// standby: the node placement would move the replica to if its node
	// failed. That node then loads it from its own disk.
	Prestage bool `yaml:"prestage" json:"prestage,omitempty"`
	// Warm also loads the prestaged model at each standby, where its
	// unreserved memory allows: the standby answers its own host's
	// requests as soon as no replica does, and becomes the replacement
	// without loading. Needs Prestage.
	Warm bool `yaml:"warm" json:"warm,omitempty"`
	// Burst lets replicas that no node of Tiers can hold within the SLO
	// overflow to other tiers, a little further away.
	Burst *Burst `yaml:"burst" json:"burst,omitempty"`
	// Autoscale lets the number of replicas follow the load; Replicas is
	// then where it starts (default Min).
	Autoscale *Autoscale `yaml:"autoscale" json:"autoscale,omitempty"`
	// Rollout says how a new model version replaces the old.
	Rollout *Rollout `yaml:"rollout" json:"rollout,omitempty"`
	// Drift says what to watch in the live inputs.
	Drift *Drift `yaml:"drift" json:"drift,omitempty"`
	// Retrain is the TrainingJob to run when drift is detected.
	Retrain *TrainingJobSpec `yaml:"retrain" json:"retrain,omitempty"`
}

// ModelRef names a model version by name and version, or by digest.
type ModelRef struct {
	// Name is the model's name as published ("fraud").
	Name string `yaml:"name" json:"name,omitempty"`
	// Version is the published version ("3"); empty means the most
	// recently published one.
	Version string `yaml:"version" json:"version,omitempty"`
	// Digest pins the exact artifact ("sha256:<64 hex>").
	Digest string `yaml:"digest" json:"digest,omitempty"`
}

// Resources is what one replica or gang member needs.
type Resources struct {
	// CPU as Kubernetes writes it: "2", "0.5", "500m". Stored in millicores.
	CPU CPU `yaml:"cpu" json:"cpu,omitempty"`
	// Memory as people write it: "512Mi", "16GiB". Stored in bytes.
	Memory Bytes `yaml:"memory" json:"memory,omitempty"`
	// GPUs asks for whole GPUs.
	GPUs *GPURequest `yaml:"gpus" json:"gpus,omitempty"`
}

// GPURequest asks for Count GPUs, optionally of a model and memory size.
type GPURequest struct {
	// Count is the number of whole GPUs, 1 to MaxGPUsPerNode.
	Count int `yaml:"count" json:"count"`
	// Model matches as a case-insensitive substring ("H100").
	Model string `yaml:"model" json:"model,omitempty"`
	// Memory is the least memory per GPU.
	Memory Bytes `yaml:"memory" json:"memory,omitempty"`
}

// Latency is an RTT SLO from client sites or regions.
type Latency struct {
	// P99 bounds the predicted RTT from every client ("20ms").
	P99 Duration `yaml:"p99" json:"p99"`
	// Clients are the site or region names the clients are in.
	Clients []string `yaml:"clients" json:"clients"`
}

// Affinity is a weighted preference. A boolean expression adds Weight to
// the nodes it holds for; a numeric one adds Weight × its value clamped
// to [0, 1].
type Affinity struct {
	// Expr is the compiled expression (bool, int or double).
	Expr *Expr `yaml:"expr" json:"expr"`
	// Weight scales the expression's score. Default 1; 0 switches the
	// affinity off; never negative.
	Weight float64 `yaml:"weight" json:"weight"`
}

// Autoscale bounds an InferenceService's replicas and says what load one
// replica should carry. The policy's owner adds replicas when the
// replicas' reported load asks for more, and removes them when it has
// asked for fewer for ScaleDownAfter.
type Autoscale struct {
	// Min and Max bound the replicas (with PerClientSite, each client
	// site's): Min default 1, Max required.
	Min int `yaml:"min" json:"min"`
	Max int `yaml:"max" json:"max"`
	// Target is the load one replica should carry: exactly one of its
	// fields.
	Target AutoscaleTarget `yaml:"target" json:"target"`
	// ScaleDownAfter is how long the load must have asked for fewer
	// replicas before any is removed. Default 5m (DefaultScaleDownAfter).
	ScaleDownAfter Duration `yaml:"scaleDownAfter" json:"scaleDownAfter,omitempty"`
}

// AutoscaleTarget is the load per replica to scale to: requests per
// second, requests in flight, or a p99 handling time (a replica is added
// while the slowest replica's p99 is over it, and removed while every
// replica's is under half of it).
type AutoscaleTarget struct {
	RPS      float64  `yaml:"rps" json:"rps,omitempty"`
	Inflight float64  `yaml:"inflight" json:"inflight,omitempty"`
	P99      Duration `yaml:"p99" json:"p99,omitempty"`
}

// Burst says where an InferenceService's overflow goes: replicas that no
// node of the service's tiers can hold within its latency SLO are placed
// on Tiers within the SLO plus MaxExtraLatency, and come back once the
// service's own tiers have held room for them for ScaleDownAfter.
type Burst struct {
	// Tiers take the overflow, in preference order.
	Tiers []string `yaml:"tiers" json:"tiers"`
	// MaxExtraLatency is how much further than the SLO an overflow
	// replica may be. Default 0: the SLO itself.
	MaxExtraLatency Duration `yaml:"maxExtraLatency" json:"maxExtraLatency,omitempty"`
	// ScaleDownAfter is how long the service's tiers must have had room
	// before overflow replicas come back. Default 5m.
	ScaleDownAfter Duration `yaml:"scaleDownAfter" json:"scaleDownAfter,omitempty"`
}

// DefaultScaleDownAfter is Autoscale.ScaleDownAfter's default.
const DefaultScaleDownAfter = 5 * time.Minute

// Rollout says how a new version replaces the old one.
type Rollout struct {
	// Strategy is "canary" (the drifted or first site first, then the
	// rest) or "all" (everywhere at once). Default canary.
	Strategy string `yaml:"strategy" json:"strategy"`
	// CanaryRequests is how many requests the canary serves without a
	// regression before promotion. Default 100.
	CanaryRequests int `yaml:"canaryRequests" json:"canaryRequests"`
	// MaxErrorRate above which the canary is rolled back. Default 0.01.
	MaxErrorRate float64 `yaml:"maxErrorRate" json:"maxErrorRate"`
	// CanaryTimeout rolls the canary back when it has not served
	// CanaryRequests within it. Default 10m (DefaultCanaryTimeout).
	CanaryTimeout Duration `yaml:"canaryTimeout" json:"canaryTimeout,omitempty"`
}

// DefaultCanaryTimeout is Rollout.CanaryTimeout's default.
const DefaultCanaryTimeout = 10 * time.Minute

// Drift says how to watch a model's live inputs.
type Drift struct {
	// Features are the input features to watch by name; empty means all.
	Features []string `yaml:"features" json:"features,omitempty"`
	// Detector is psi, ks or wasserstein. Default psi.
	Detector string `yaml:"detector" json:"detector"`
	// Threshold is the detector's alarm level (PSI 0.2; KS p-value 0.001;
	// Wasserstein in standard deviations 0.3 by default).
	Threshold float64 `yaml:"threshold" json:"threshold"`
	// Window is the live window in samples. Default 500.
	Window int `yaml:"window" json:"window"`
	// Reference is "training" (the summary shipped with the model) or
	// "first" (the first Window live samples). Default training.
	Reference string `yaml:"reference" json:"reference"`
	// Stream turns on the streaming detector that checks every sampled
	// row (a CUSUM per input feature): it catches an abrupt shift in tens
	// of rows, where the windowed detectors need about a window. Off when
	// absent: a model retrained on one site's drifted rows has a reference
	// the other sites' rows do not match, and the streaming detector
	// reports that within tens of rows (a second retrain), where the
	// windowed ones took long enough for rollouts to settle first.
	Stream *DriftStream `yaml:"stream" json:"stream,omitempty"`
}

// DriftStream configures the streaming drift detector.
type DriftStream struct {
	// Enabled, when false, turns it off although the block is present.
	// Default true.
	Enabled *bool `yaml:"enabled" json:"enabled,omitempty"`
	// FalseAlarmEvery is the expected number of sampled rows between two
	// false alarms of the model (all its features together). Default
	// 1000000; at least 10.
	FalseAlarmEvery int64 `yaml:"falseAlarmEvery" json:"falseAlarmEvery"`
	// Shift is the mean shift, in reference standard deviations, caught
	// fastest. Default 1; larger shifts are still caught, smaller ones
	// later.
	Shift float64 `yaml:"shift" json:"shift"`
}

// On says whether the streaming detector runs: a stream block is present
// and not disabled.
func (s *DriftStream) On() bool { return s != nil && (s.Enabled == nil || *s.Enabled) }

// TrainingJobSpec says what to run as a gang, on what, near which data.
type TrainingJobSpec struct {
	// Gang is the shape of the job. Default 1 node × Resources.GPUs.
	Gang Gang `yaml:"gang" json:"gang"`
	// Resources is what each member needs (besides its GPUs).
	Resources Resources `yaml:"resources" json:"resources"`
	// Data is what the job reads: it is placed near it.
	Data []DataRef `yaml:"data" json:"data,omitempty"`
	// Code is the job's code: a code artifact (name, name:version or
	// sha256:digest; `strata push DIR --kind code`) unpacked on every
	// member node into the ranks' working directory. Empty: the command
	// must already be on every member node.
	Code string `yaml:"code" json:"code,omitempty"`
	// Launcher is "exec" (run Command and Args as every rank), "torchrun"
	// (run PyTorch's torchrun on every member node, which starts
	// Gang.RanksPerNode workers of the script in Command and Args) or
	// "builtin" (the Go trainer for small tabular models). Default: exec
	// when Command is set, else builtin.
	Launcher string `yaml:"launcher" json:"launcher"`
	// Builtin configures the built-in trainer.
	Builtin *Builtin `yaml:"builtin" json:"builtin,omitempty"`
	// Command, Args and Env are what exec runs as each rank (for
	// torchrun: the training script and its arguments).
	Command []string          `yaml:"command" json:"command,omitempty"`
	Args    []string          `yaml:"args" json:"args,omitempty"`
	Env     map[string]string `yaml:"env" json:"env,omitempty"`
	// Priority orders jobs competing for a fabric; higher first.
	Priority int `yaml:"priority" json:"priority,omitempty"`
	// MaxDuration stops a job that runs longer. Default 24h.
	MaxDuration Duration `yaml:"maxDuration" json:"maxDuration"`
	// Retries is how often a failed job is started again. Default 0.
	Retries int `yaml:"retries" json:"retries,omitempty"`
	// Tiers is where the gang may go, in preference order. Default
	// [onprem, cloud].
	Tiers []string `yaml:"tiers" json:"tiers"`
	// Constraints and Affinities as for InferenceService.
	Constraints []*Expr    `yaml:"constraints" json:"constraints,omitempty"`
	Affinities  []Affinity `yaml:"affinities" json:"affinities,omitempty"`
	// Sweep makes the job a hyperparameter search: its trials are copies
	// of the job with the parameters set, and the best one's parameters
	// train the model the job registers.
	Sweep *Sweep `yaml:"sweep" json:"sweep,omitempty"`
	// Capture, in an InferenceService's retrain only, trains on the
	// drifted site's own rows too: after a drift alarm, the node that
	// raised it keeps the labelled rows its clients post as ground truth
	// (POST /v1/models/{name}/feedback), publishes them as a dataset
	// version, and the retrain reads it beside Data.
	Capture *Capture `yaml:"capture" json:"capture,omitempty"`
}

// Capture says how much of the drifted site's labelled live data a
// retrain waits for, and how much of the training it makes up.
type Capture struct {
	// Rows is the labelled rows to capture after the alarm before the
	// retrain starts. Default 500 (DefaultCaptureRows).
	Rows int `yaml:"rows" json:"rows"`
	// Mix is the fraction of the builtin trainer's rows drawn from the
	// capture (its rows are resampled to make it up), 0 to 0.9.
	// Default 0.5.
	Mix float64 `yaml:"mix" json:"mix"`
	// Timeout starts the retrain on Data alone when Rows labelled rows
	// have not arrived within it of the alarm. Default 30m.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Source is what is captured: "feedback" (the ground truth clients
	// post, rows with their labels) or "inputs" (the live inputs the
	// monitor samples, unlabelled, for an exec or torchrun retrain that
	// trains without labels). Default feedback.
	Source string `yaml:"source" json:"source"`
}

// Capture sources.
const (
	CaptureFeedback = "feedback"
	CaptureInputs   = "inputs"
)

// Capture defaults.
const (
	DefaultCaptureRows    = 500
	DefaultCaptureMix     = 0.5
	DefaultCaptureTimeout = 30 * time.Minute
	// MaxCaptureRows bounds the rows a node keeps for one capture.
	MaxCaptureRows = 100_000
)

// Sweep is a hyperparameter search over a TrainingJob.
type Sweep struct {
	// Algorithm is random, grid or tpe (model-based). Default random.
	Algorithm string `yaml:"algorithm" json:"algorithm"`
	// Parameters are the search space.
	Parameters []SweepParam `yaml:"parameters" json:"parameters"`
	// Objective is the metric to optimise.
	Objective Objective `yaml:"objective" json:"objective"`
	// MaxTrials bounds the trials run. Default 12.
	MaxTrials int `yaml:"maxTrials" json:"maxTrials"`
	// ParallelTrials run at once. Default 2.
	ParallelTrials int `yaml:"parallelTrials" json:"parallelTrials"`
	// MaxFailedTrials fails the search when more trials fail. Default 3.
	MaxFailedTrials int `yaml:"maxFailedTrials" json:"maxFailedTrials"`
	// Seed drives the algorithm's proposals. Default 1 when not written;
	// seed: 0 is a seed of its own.
	Seed int64 `yaml:"seed" json:"seed"`
	// EarlyStopping stops poor trials before they end; nil runs every
	// trial to its end.
	EarlyStopping *EarlyStopping `yaml:"earlyStopping" json:"earlyStopping,omitempty"`
}

// EarlyStopping is a sweep's rule for stopping poor trials, which reads
// the objective the trials report per step.
type EarlyStopping struct {
	// Rule is median: a trial stops when its best value so far is worse
	// than the median of the finished trials' running averages at the
	// same step (Golovin et al. 2017, "Google Vizier").
	Rule string `yaml:"rule" json:"rule"`
	// MinSteps is the steps a trial reports before it may be stopped.
	// Default 5.
	MinSteps int `yaml:"minSteps" json:"minSteps"`
	// MinTrials is the trials that must have finished before any is
	// stopped. Default 3.
	MinTrials int `yaml:"minTrials" json:"minTrials"`
}

// StopMedian is the median stopping rule.
const StopMedian = "median"

// SweepParam is one dimension of a search space: a float or int range
// (min, max, scale linear or log) or categorical values.
type SweepParam struct {
	// Name is the builtin setting (learningRate, epochs, hidden, holdout,
	// algorithm) or, for exec, the parameter the trial reads as
	// $STRATA_PARAM_<NAME>.
	Name string `yaml:"name" json:"name"`
	// Type is float, int or categorical. Default categorical when values
	// are given, else float.
	Type string  `yaml:"type" json:"type"`
	Min  float64 `yaml:"min" json:"min,omitempty"`
	Max  float64 `yaml:"max" json:"max,omitempty"`
	// Scale is linear or log. Default linear.
	Scale string `yaml:"scale" json:"scale,omitempty"`
	// Values are a categorical parameter's choices, written as YAML
	// values ("0.1", "[32, 32]", "mlp").
	Values []string `yaml:"values" json:"values,omitempty"`
}

// Objective is what a sweep optimises.
type Objective struct {
	// Metric is a number the trial reports in its metrics.json (the
	// builtin trainer: accuracy, train_accuracy, loss). Default accuracy.
	Metric string `yaml:"metric" json:"metric"`
	// Goal is maximize or minimize. Default maximize, minimize for loss.
	Goal string `yaml:"goal" json:"goal"`
	// Target ends the search early once a trial reaches it; 0: none.
	Target float64 `yaml:"target" json:"target,omitempty"`
}

// Gang is Nodes members with GPUsPerNode GPUs each.
type Gang struct {
	// Nodes is the number of members, one per node. Default 1.
	Nodes int `yaml:"nodes" json:"nodes"`
	// GPUsPerNode is each member's GPUs. Default Resources.GPUs.Count.
	GPUsPerNode int `yaml:"gpusPerNode" json:"gpusPerNode"`
	// RanksPerNode is the processes each member node runs (torchrun's
	// --nproc_per_node): the gang's world is Nodes × RanksPerNode ranks,
	// and a node's GPUs are shared out evenly among its ranks. Default 1.
	RanksPerNode int `yaml:"ranksPerNode" json:"ranksPerNode"`
	// Fabric is "same" (every member on one RDMA fabric, the default) or
	// "any".
	Fabric string `yaml:"fabric" json:"fabric"`
}

// DataRef is a dataset (name or name:version) or an artifact (digest) the
// job reads.
type DataRef struct {
	// Dataset is "name" or "name:version".
	Dataset string `yaml:"dataset" json:"dataset,omitempty"`
	// Artifact is a digest, "sha256:<64 hex>".
	Artifact string `yaml:"artifact" json:"artifact,omitempty"`
	// Size is the bytes to move when no node near the job holds it.
	Size Bytes `yaml:"size" json:"size,omitempty"`
	// Mix is the fraction of the builtin trainer's rows drawn from this
	// dataset, its rows resampled to make it up; 0 takes its rows as
	// they are. A retrain's capture sets it.
	Mix float64 `yaml:"mix" json:"mix,omitempty"`
}

// Builtin configures the built-in trainer.
type Builtin struct {
	// Algorithm is logreg or mlp.
	Algorithm string `yaml:"algorithm" json:"algorithm"`
	// Hidden are the MLP's hidden layer sizes. Default [32].
	Hidden []int `yaml:"hidden" json:"hidden,omitempty"`
	// Epochs over the data. Default 20.
	Epochs int `yaml:"epochs" json:"epochs"`
	// LearningRate of the optimiser. Default 0.01.
	LearningRate float64 `yaml:"learningRate" json:"learningRate"`
	// Label is the name of the label column.
	Label string `yaml:"label" json:"label,omitempty"`
	// Holdout is the fraction of rows kept out of training to measure the
	// model's accuracy, 0 to 0.9. Default 0.2; 0 trains on every row and
	// reports the accuracy on the training rows.
	Holdout float64 `yaml:"holdout" json:"holdout"`
	// Seed drives initialisation, the holdout split and shuffling: the
	// same data, settings and seed give the same model bytes. Default 1.
	Seed int64 `yaml:"seed" json:"seed"`
}

// Duration is a time.Duration written as "20ms", "1.5s", "2h".
type Duration time.Duration

// MarshalJSON writes the duration as people do.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) parseScalar(s string) error {
	v, err := ParseDuration(s)
	*d = Duration(v)
	return err
}

// Bytes is a byte count written as "512Mi", "16GiB", "80GB".
type Bytes int64

func (b *Bytes) parseScalar(s string) error {
	v, err := ParseBytes(s)
	*b = Bytes(v)
	return err
}

// CPU is millicores written as "2", "0.5" or "500m".
type CPU int64

func (c *CPU) parseScalar(s string) error {
	v, err := ParseCPU(s)
	*c = CPU(v)
	return err
}

// marshalPlain is json.Marshal without HTML escaping: policies are full
// of && and >=, and the JSON is for people and programs, not HTML.
func marshalPlain(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

package catalog

// Manifest metadata keys the agent writes and reads.
const (
	// MetaReference holds a model version's drift reference (JSON of
	// drift.Reference): the summary of its training data.
	MetaReference = "strata.drift.reference"
	// MetaSiteReferences holds a model version's drift references for
	// particular sites (JSON of map[site]drift.Reference): a retrain that
	// captured a drifted site's rows summarises them apart, and that
	// site's monitors compare with them; other sites use MetaReference.
	MetaSiteReferences = "strata.drift.site-references"
	// Metadata of a dataset captured from a drifted site's live data:
	// the site and node it came from, the policy and model version it
	// was served by, and when the alarm that started it fired
	// (RFC 3339).
	MetaCaptureSite    = "strata.capture.site"
	MetaCaptureNode    = "strata.capture.node"
	MetaCapturePolicy  = "strata.capture.policy"
	MetaCaptureVersion = "strata.capture.version"
	MetaCaptureAlarm   = "strata.capture.alarm-at"
	// MetaFeatures holds a model's input feature names, comma-separated.
	MetaFeatures = "strata.features"
	// MetaJob names the training job that produced a model version.
	MetaJob = "strata.job"
	// MetaAccuracy is the holdout accuracy the trainer measured.
	MetaAccuracy = "strata.accuracy"
	// MetaOpsets are a pushed ONNX model's operator sets,
	// "ai.onnx=13,ai.onnx.ml=1"; MetaProducer the tool that wrote it.
	MetaOpsets   = "strata.opsets"
	MetaProducer = "strata.producer"
	// MetaInputs and MetaOutputs are a pushed model's graph inputs and
	// outputs, "name FP32[?,3]", separated by "; ".
	MetaInputs  = "strata.inputs"
	MetaOutputs = "strata.outputs"
)

// Labels on a TrainingJob that register its output model: the model file
// the job leaves in STRATA_OUTPUT_DIR becomes this name and version, signed
// by the agent that ran rank 0.
const (
	LabelOutputModel   = "strata.io/output-model"
	LabelOutputVersion = "strata.io/output-version"
	// LabelRetrainOf marks a job the mesh started to retrain a service.
	LabelRetrainOf = "strata.io/retrain-of"
	// LabelRetrainFrom is the version of the service's model a retrain
	// started from: the new version's parent in its lineage.
	LabelRetrainFrom = "strata.io/retrain-from"
)

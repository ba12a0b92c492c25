package agent

import (
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/events"
	"github.com/strata-mesh/strata/internal/httpapi"
)

// The catalog's record types, under the names the API and CLI have used.
type (
	// PolicyRecord is an applied policy (catalog.Policy).
	PolicyRecord = catalog.Policy
	// PlacementRecord is where a policy's owner placed it (catalog.Placement).
	PlacementRecord = catalog.Placement
	// PlacedNode is one chosen node of a placement.
	PlacedNode = catalog.PlacedNode
	// JobRecord is one training job's run (catalog.Job).
	JobRecord = catalog.Job
	// RolloutRecord is a service's latest retrain and rollout (catalog.Rollout).
	RolloutRecord = catalog.Rollout
	// RolloutStep is one stage change of a rollout.
	RolloutStep = catalog.RolloutStep
	// DriftTrigger is the drift alarm that started a retrain.
	DriftTrigger = catalog.DriftTrigger
	// DriftRecord is one node's drift monitor for one policy (catalog.Drift).
	DriftRecord = catalog.Drift
	// DriftPoint is one evaluation in a DriftRecord's history.
	DriftPoint = catalog.DriftPoint
	// Event is one step of the control loop (events.Event).
	Event = events.Event

	// PlacementStatus is one policy's placement as GET /v1/placements shows it.
	PlacementStatus = httpapi.PlacementStatus
	// PlanResult is the answer of POST /v1/plan.
	PlanResult = httpapi.PlanResult
	// ApplyResult is one policy's outcome of POST /v1/policies.
	ApplyResult = httpapi.ApplyResult
	// PolicyError is one problem in a policy document, with its position.
	PolicyError = httpapi.PolicyError
	// ModelInfo is one model version as GET /v1/models shows it.
	ModelInfo = httpapi.ModelInfo
	// LineageChain is a model version's lineage as GET /v1/lineage shows it.
	LineageChain = httpapi.LineageChain
	// ExperimentRecord is a hyperparameter search (catalog.Experiment).
	ExperimentRecord = catalog.Experiment
)

// Placement states.
const (
	StatePending = catalog.StatePending
	StatePlaced  = catalog.StatePlaced
	StateFailed  = catalog.StateFailed
	StateDone    = catalog.StateDone
)

// Job states.
const (
	JobPending   = catalog.JobPending
	JobRunning   = catalog.JobRunning
	JobSucceeded = catalog.JobSucceeded
	JobFailed    = catalog.JobFailed
)

// Rollout stages.
const (
	StageRetraining = catalog.StageRetraining
	StageCanary     = catalog.StageCanary
	StagePromoted   = catalog.StagePromoted
	StageRolledBack = catalog.StageRolledBack
	StageFailed     = catalog.StageFailed
)

// Manifest metadata keys and policy labels the components share.
const (
	MetaReference      = catalog.MetaReference
	MetaSiteReferences = catalog.MetaSiteReferences
	MetaCaptureSite    = catalog.MetaCaptureSite
	MetaCaptureNode    = catalog.MetaCaptureNode
	MetaCaptureVersion = catalog.MetaCaptureVersion
	MetaFeatures       = catalog.MetaFeatures
	MetaJob            = catalog.MetaJob
	MetaOpsets         = catalog.MetaOpsets
	MetaAccuracy       = catalog.MetaAccuracy
	LabelOutputModel   = catalog.LabelOutputModel
	LabelOutputVersion = catalog.LabelOutputVersion
	LabelRetrainOf     = catalog.LabelRetrainOf
)

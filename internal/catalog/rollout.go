package catalog

import "time"

// StageUnchanged ends a rollout whose retrain produced a model already
// served, canaried or rolled back (the same digest): there is nothing to
// roll out.
const StageUnchanged = "unchanged"

// OutcomeServed is a TriedModel's outcome for a version that was serving
// when a retrain of it started; the other outcomes are rollout stages
// (StageCanary, StagePromoted, StageRolledBack).
const OutcomeServed = "served"

// TriedModel is one model version a service's rollouts have served or
// tried, and how that went.
type TriedModel struct {
	Version string `json:"version"`
	// Digest is the model's sha256, empty when the artifact was not found.
	Digest string `json:"digest,omitempty"`
	// Outcome is OutcomeServed or the stage the version's rollout reached.
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
}

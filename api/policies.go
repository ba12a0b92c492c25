package api

import (
	"fmt"
	"time"
)

// Policy is an applied policy (GET /v1/policies).
type Policy struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Source is the YAML document as applied.
	Source string `json:"source"`
	// File is the file name it was applied from.
	File string `json:"file,omitempty"`
	// Generation counts applies that changed Source.
	Generation uint64    `json:"generation"`
	Applied    time.Time `json:"applied"`
	// AppliedAt is the agent that took the apply (a controller);
	// AppliedVia the agent the apply was made at, when it passed it on;
	// AppliedBy the API token's name.
	AppliedAt  string `json:"applied_at"`
	AppliedVia string `json:"applied_via,omitempty"`
	AppliedBy  string `json:"applied_by,omitempty"`
	// Site is that agent's site; in a federated mesh the policy is placed
	// within it, unless no node there could take it and another site's
	// summary showed room: Site is then that site, and HandedFrom the
	// first.
	Site       string `json:"site,omitempty"`
	HandedFrom string `json:"handed_from,omitempty"`
}

// Key is the policy's identity, "Kind/name".
func (p Policy) Key() string { return p.Kind + "/" + p.Name }

// ApplyResult says what an apply did to one policy (POST /v1/policies).
type ApplyResult struct {
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// Changed is false when the same source was applied again.
	Changed bool `json:"changed"`
	// Warnings say what the policy waits for, as a plan would: a model
	// or dataset version not published, room the mesh has not got now, a
	// client site not measured yet. An apply that warns still applies.
	Warnings []string `json:"warnings,omitempty"`
}

// PolicyError is one problem in a policy document, with its position. A
// policy that does not parse or validate comes back as a 400 with every
// problem (see client.Error).
type PolicyError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// String formats the error as file:line:column: field: message.
func (e PolicyError) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Message)
}

// PlanResult is one policy's dry-run placement (POST /v1/plan).
type PlanResult struct {
	Policy   string    `json:"policy"`
	Decision *Decision `json:"decision"`
	// Explanation is the decision for people; Why explains one node when
	// asked.
	Explanation string `json:"explanation"`
	Why         string `json:"why,omitempty"`
	// Warnings name what the policy refers to that is not published: it
	// would be placed, but would wait for it.
	Warnings []string `json:"warnings,omitempty"`
	// HandOff, in a federated mesh, is the site an apply would hand the
	// policy to when no node of this agent's site can take it.
	HandOff *HandOff `json:"hand_off,omitempty"`
	// Burst are the replicas a service with burst would place on its
	// burst tiers: those Decision could not place within its own.
	Burst []Choice `json:"burst,omitempty"`
}

// HandOff names the site a policy would be handed to, and why that site.
type HandOff struct {
	Site string `json:"site"`
	Why  string `json:"why"`
}

// Decision is a placement decision: the chosen nodes with their scores,
// and for the others the count of nodes rejected per reason.
type Decision struct {
	// Kind is the workload kind placed (inference, training, ...).
	Kind string `json:"kind"`
	Key  string `json:"key,omitempty"`
	// Feasible is true when every wanted replica or gang member found a
	// node.
	Feasible bool `json:"feasible"`
	// Wanted is how many nodes the request asked for.
	Wanted int `json:"wanted"`
	// Tiers are the tiers tried, in order.
	Tiers []string `json:"tiers,omitempty"`
	// Placements are the chosen nodes, best first.
	Placements []Choice `json:"placements"`
	// Domain is the fabric a gang was placed in, if one was.
	Domain *Domain `json:"domain,omitempty"`
	// Fallbacks say which tiers were passed over and why.
	Fallbacks []Fallback `json:"fallbacks,omitempty"`
	// Nodes counts the snapshot's nodes; Evaluated those looked at.
	Nodes     int `json:"nodes"`
	Evaluated int `json:"evaluated"`
	// Rejected counts the nodes rejected per reason.
	Rejected map[string]int `json:"rejected"`
}

// Choice is one chosen node of a Decision, with its score breakdown.
type Choice struct {
	Node   string `json:"node"`
	NodeID string `json:"node_id"`
	Tier   string `json:"tier"`
	Site   string `json:"site"`
	Region string `json:"region"`
	Fabric string `json:"fabric,omitempty"`
	Rack   string `json:"rack,omitempty"`
	// Client is the client site this replica serves, for latency policies.
	Client string `json:"client,omitempty"`
	// Rank is the member's index in a gang.
	Rank      int       `json:"rank"`
	Resources Resources `json:"resources"`
	Scores    []Score   `json:"scores"`
	Total     float64   `json:"total"`
}

// Score is one scorer's contribution to a node's total.
type Score struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Weight float64 `json:"weight"`
	Detail string  `json:"detail,omitempty"`
}

// Domain is the fabric a gang was placed in, with its scores.
type Domain struct {
	Tier   string  `json:"tier"`
	Fabric string  `json:"fabric,omitempty"`
	Scores []Score `json:"scores"`
	Total  float64 `json:"total"`
}

// Fallback says why a tier was passed over.
type Fallback struct {
	Client  string `json:"client,omitempty"`
	Tier    string `json:"tier"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Resources are what one replica or gang member takes: CPU in millicores,
// memory and GPU memory in bytes.
type Resources struct {
	CPU       int64  `json:"cpu,omitempty"`
	Memory    int64  `json:"memory,omitempty"`
	GPUs      int    `json:"gpus,omitempty"`
	GPUModel  string `json:"gpu_model,omitempty"`
	GPUMemory int64  `json:"gpu_memory,omitempty"`
}

// Placement states.
const (
	StatePending = "pending" // not placed yet, or waiting for nodes
	StatePlaced  = "placed"
	StateFailed  = "failed"
	StateDone    = "done" // a training job ended; its nodes are free
)

// PlacementStatus is one policy's placement (GET /v1/placements).
type PlacementStatus struct {
	// Policy is the policy's key; Generation the policy's generation.
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// PlacedGeneration is the policy generation the placement is of:
	// less than Generation while a change is being placed, 0 before any
	// placement (and from agents that do not say).
	PlacedGeneration uint64 `json:"placed_generation,omitempty"`
	Key              string `json:"key"`
	Kind             string `json:"kind"`
	Name             string `json:"name"`
	// Owner is the controller agent that placed it; Epoch counts its
	// placements.
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	// State is pending, placed, failed or done.
	State string `json:"state"`
	// Nodes are the chosen nodes; Wanted how many the policy asks for.
	Nodes  []PlacedNode `json:"nodes"`
	Wanted int          `json:"wanted"`
	// Message says what happened in a line; Fallbacks and Rejected say
	// why.
	Message   string         `json:"message,omitempty"`
	Fallbacks []Fallback     `json:"fallbacks,omitempty"`
	Rejected  map[string]int `json:"rejected,omitempty"`
	// Refused maps nodes that refused earlier epochs to their reason.
	Refused   map[string]string `json:"refused,omitempty"`
	Resources Resources         `json:"resources"`
	// Scale is an autoscaled service's replica count and the evidence
	// for its last change; nil for a fixed count.
	Scale   *Scale    `json:"scale,omitempty"`
	Updated time.Time `json:"updated"`
	// Rollout is the service's latest retrain and rollout, if any.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Scale is an autoscaled service's replica count (Replicas) and its last
// change: from From, at At, because of the load Reason tells.
type Scale struct {
	Replicas int `json:"replicas"`
	From     int `json:"from"`
	// Sites is, for a service placed per client site, each client site's
	// count; Replicas is their sum.
	Sites  map[string]int `json:"sites,omitempty"`
	Reason string         `json:"reason,omitempty"`
	At     time.Time      `json:"at"`
}

// PlacedNode is one chosen node and whether it has admitted the work.
type PlacedNode struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Tier     string `json:"tier"`
	Site     string `json:"site"`
	Rank     int    `json:"rank"`
	Admitted bool   `json:"admitted"`
	// Client is the client site this replica serves, for a service
	// placed per client site.
	Client string `json:"client,omitempty"`
	// Replica is, for an inference service, what the node reports of its
	// model (GET /v1/placements fills it in): loading, serving or failed,
	// with Reason.
	Replica string `json:"replica,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Standby is, for a service that prestages its model, the node the
	// replica would move to if its node failed; it holds the model ahead
	// of time.
	Standby string `json:"standby,omitempty"`
	// StandbyWarm says the standby has the replica's model loaded, ready
	// to answer when the replica does not.
	StandbyWarm bool `json:"standby_warm,omitempty"`
	// Burst marks a replica placed on a burst tier (the service's own
	// tiers had no room); it comes back when they have.
	Burst bool `json:"burst,omitempty"`
}

// Rollout stages.
const (
	StageRetraining = "retraining"
	StageCanary     = "canary"
	StagePromoted   = "promoted"
	StageRolledBack = "rolled-back"
	StageFailed     = "failed"
	// StageUnchanged: the retrain produced the model already served.
	StageUnchanged = "unchanged"
)

// Rollout is a service's latest retrain and rollout.
type Rollout struct {
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// Seq counts the service's retrains.
	Seq   int    `json:"seq"`
	Stage string `json:"stage"`
	Model string `json:"model"`
	// From is the version served when drift was detected; To the new one.
	From    string        `json:"from"`
	To      string        `json:"to,omitempty"`
	Job     string        `json:"job,omitempty"`
	Trigger *DriftTrigger `json:"trigger,omitempty"`
	// CanarySite and CanaryNodes serve To first; Served and Failed count
	// their requests on it, against CanaryRequests and MaxErrorRate.
	CanarySite     string   `json:"canary_site,omitempty"`
	CanaryNodes    []string `json:"canary_nodes,omitempty"`
	CanaryRequests int      `json:"canary_requests,omitempty"`
	MaxErrorRate   float64  `json:"max_error_rate,omitempty"`
	Served         uint64   `json:"served,omitempty"`
	Failed         uint64   `json:"failed,omitempty"`
	// Baseline is From's record on the canary nodes before they swapped:
	// the canary is judged against it.
	Baseline *CanaryBaseline `json:"baseline,omitempty"`
	Message  string          `json:"message"`
	Started  time.Time       `json:"started"`
	Updated  time.Time       `json:"updated"`
	Steps    []RolloutStep   `json:"steps"`
	// Attempt counts the retrains of From in a row, this one included.
	Attempt int `json:"attempt,omitempty"`
	// NextRetrainAfter, set when the rollout ended without promoting, is
	// when an alarm on From may start the next retrain.
	NextRetrainAfter time.Time `json:"next_retrain_after,omitzero"`
	// Tried are the versions served, canaried or rolled back lately: a
	// retrain that yields one of their digests ends unchanged.
	Tried []TriedModel `json:"tried,omitempty"`
}

// CanaryBaseline is the current version's requests on the canary nodes
// before the canary, and what its drift monitors there last said.
type CanaryBaseline struct {
	Version string `json:"version"`
	Served  uint64 `json:"served"`
	Failed  uint64 `json:"failed"`
	Drift   string `json:"drift,omitempty"`
}

// TriedModel is a model version a service served or tried, with its
// digest and how it went.
type TriedModel struct {
	Version string    `json:"version"`
	Digest  string    `json:"digest,omitempty"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
}

// Ended says the rollout is over: promoted, rolled back, failed or
// unchanged.
func (r Rollout) Ended() bool {
	return r.Stage == StagePromoted || r.Stage == StageRolledBack || r.Stage == StageFailed || r.Stage == StageUnchanged
}

// DriftTrigger is the drift alarm that started a retrain.
type DriftTrigger struct {
	Site      string    `json:"site"`
	Node      string    `json:"node"`
	Version   string    `json:"version"`
	Samples   int64     `json:"samples"`
	At        time.Time `json:"at"`
	Feature   string    `json:"feature"`
	Statistic float64   `json:"statistic"`
	Detector  string    `json:"detector"`
	// Drifted names every feature (and "prediction") past the threshold.
	Drifted []string `json:"drifted"`
}

// RolloutStep is one stage change of a rollout.
type RolloutStep struct {
	Time    time.Time `json:"time"`
	Stage   string    `json:"stage"`
	Message string    `json:"message"`
}

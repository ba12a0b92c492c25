package placement

// Reason says why a node was not chosen. Reasons are stable strings: the
// CLI, the HTTP API, the UI and the tests speak the same words.
//
// The filters run in the order the constants are declared; a node's Reason
// is the first check it failed. When a request has several client groups
// (PerClientSite), a node gets the reason from the group where it came
// furthest through the pipeline.
type Reason string

// Reasons, in pipeline order.
const (
	// ReasonNotAlive: the mesh does not consider the node alive.
	ReasonNotAlive Reason = "not_alive"
	// ReasonExcluded: the request excludes the node (for example because it
	// refused an earlier assignment).
	ReasonExcluded Reason = "excluded"
	// ReasonTier: the node's tier is not among the request's tiers.
	ReasonTier Reason = "tier"
	// ReasonTierNotReached: the node's tier is allowed, but every placement
	// fitted on a more preferred tier, so this tier was never considered.
	ReasonTierNotReached Reason = "tier_not_reached"
	// ReasonNoGPU: the request needs GPUs and the node has none.
	ReasonNoGPU Reason = "no_gpu"
	// ReasonGPUModel: the node has no GPU of the requested model.
	ReasonGPUModel Reason = "gpu_model"
	// ReasonNoFabric: a same-fabric gang needs an RDMA fabric and the node
	// is on none.
	ReasonNoFabric Reason = "no_fabric"
	// ReasonLatencySLO: the predicted RTT from a client site exceeds the
	// latency SLO, or the node has no network coordinate.
	ReasonLatencySLO Reason = "latency_slo"
	// ReasonInsufficientCPU: not enough free CPU.
	ReasonInsufficientCPU Reason = "insufficient_cpu"
	// ReasonInsufficientMemory: not enough free memory.
	ReasonInsufficientMemory Reason = "insufficient_memory"
	// ReasonInsufficientGPU: not enough free, healthy GPUs of the requested
	// model and memory.
	ReasonInsufficientGPU Reason = "insufficient_gpu"
	// ReasonConstraint: a hard constraint (CEL) was false or failed.
	ReasonConstraint Reason = "constraint"
	// ReasonGangDoesNotFit: the node was feasible, but its fabric does not
	// have enough feasible nodes for the whole gang.
	ReasonGangDoesNotFit Reason = "gang_does_not_fit"
	// ReasonSpread: the node was feasible, but a chosen node already holds
	// its site or region and the request spreads across them.
	ReasonSpread Reason = "spread"
	// ReasonNotSelected: the node was feasible but scored lower than the
	// nodes chosen (or its fabric lost to a better one).
	ReasonNotSelected Reason = "not_selected"
)

// Ledger-only reasons: refusals of node-local admission.
const (
	// ReasonStaleEpoch: an assignment from an owner epoch older than one the
	// node has already seen for the same key.
	ReasonStaleEpoch Reason = "stale_epoch"
	// ReasonConflict: an assignment ID the ledger already holds with
	// different contents.
	ReasonConflict Reason = "conflict"
)

// reasonFeasible is the internal marker for "passed every filter"; it is
// never shown: selection turns it into a chosen node or one of the
// selection reasons.
const reasonFeasible Reason = "feasible"

// stage orders reasons along the pipeline; higher is further.
func (r Reason) stage() int {
	switch r {
	case ReasonNotAlive:
		return 0
	case ReasonExcluded:
		return 1
	case ReasonTier:
		return 2
	case ReasonTierNotReached:
		return 3
	case ReasonNoGPU, ReasonGPUModel:
		return 4
	case ReasonNoFabric:
		return 5
	case ReasonLatencySLO:
		return 6
	case ReasonInsufficientCPU:
		return 7
	case ReasonInsufficientMemory:
		return 8
	case ReasonInsufficientGPU:
		return 9
	case ReasonConstraint:
		return 10
	case ReasonGangDoesNotFit:
		return 11
	case reasonFeasible:
		return 12
	}
	return -1
}

// Reasons lists every placement reason in pipeline order (ledger reasons
// excluded). Renderers use it to print counts in a stable order.
func Reasons() []Reason {
	return []Reason{
		ReasonNotAlive, ReasonExcluded, ReasonTier, ReasonTierNotReached,
		ReasonNoGPU, ReasonGPUModel, ReasonNoFabric, ReasonLatencySLO,
		ReasonInsufficientCPU, ReasonInsufficientMemory, ReasonInsufficientGPU,
		ReasonConstraint, ReasonGangDoesNotFit, ReasonSpread, ReasonNotSelected,
	}
}

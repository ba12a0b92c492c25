package placement

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-mesh/strata/policy"
)

// Kind is what a request places.
type Kind string

// Kinds of request.
const (
	// Inference places serving replicas, close to their clients.
	Inference Kind = "inference"
	// Training places a gang of GPU nodes, all or nothing, close to data.
	Training Kind = "training"
)

// Spread names the failure domain replicas are spread across.
type Spread string

// Spread domains.
const (
	// SpreadNone lets several replicas share a site (never a node).
	SpreadNone Spread = ""
	// SpreadSite puts at most one replica per site.
	SpreadSite Spread = "site"
	// SpreadRegion puts at most one replica per region.
	SpreadRegion Spread = "region"
)

// Tiers strata knows, in the default preference order.
const (
	TierEdge   = "edge"
	TierOnprem = "onprem"
	TierCloud  = "cloud"
)

// Constraint is a hard requirement on a node, typically a compiled CEL
// expression from a policy's `constraints`. Match is called once per
// candidate node that passed every cheaper filter; an error counts as a
// failed match (ReasonConstraint) and is shown in the explanation. It must
// be safe to call repeatedly and must not retain the node.
type Constraint interface {
	Match(n *policy.Node) (bool, error)
	// String returns the expression as written, for explanations.
	String() string
}

// Scorer rates a node, typically a compiled CEL expression from a policy's
// `affinities`. The engine clamps the result to [0, 1]; an error scores 0.
type Scorer interface {
	Score(n *policy.Node) (float64, error)
	// String returns the expression as written, for explanations.
	String() string
}

// Affinity is a soft preference: Expr's score counts with Weight.
type Affinity struct {
	// Expr rates a node in [0, 1].
	Expr Scorer
	// Weight is the affinity's weight relative to the built-in scorers
	// (whose defaults are in Options). Must not be negative.
	Weight float64
}

// Resources is what one replica or gang member needs.
type Resources struct {
	// CPU in millicores.
	CPU int64 `json:"cpu,omitempty"`
	// Memory in bytes.
	Memory int64 `json:"memory,omitempty"`
	// GPUs is the number of whole GPUs.
	GPUs int `json:"gpus,omitempty"`
	// GPUModel, when set, is matched case-insensitively as a substring of
	// the GPU's model name: "H100" matches "NVIDIA H100 80GB HBM3".
	GPUModel string `json:"gpu_model,omitempty"`
	// GPUMemory is the least memory in bytes each GPU must have.
	GPUMemory int64 `json:"gpu_memory,omitempty"`
}

// Latency is a round-trip SLO from the clients to the node.
type Latency struct {
	// P99 bounds the predicted RTT from every client to the node; zero means
	// no bound (the clients still steer scoring towards close nodes). See
	// the package doc for how the prediction relates to a p99.
	P99 time.Duration `json:"p99,omitempty"`
	// Clients names client sites or regions (sites are looked up first).
	Clients []string `json:"clients,omitempty"`
}

// Gang describes a training gang.
type Gang struct {
	// Nodes is the number of members; zero means Request.Replicas (at
	// least 1).
	Nodes int `json:"nodes,omitempty"`
	// GPUsPerNode is the GPUs each member needs; zero means
	// Request.Resources.GPUs.
	GPUsPerNode int `json:"gpus_per_node,omitempty"`
	// SameFabric puts every member on one RDMA fabric. Without it the
	// members may sit anywhere in one tier.
	SameFabric bool `json:"same_fabric,omitempty"`
}

// DataRef is data a workload wants to be near: an artifact by digest or a
// dataset by name.
type DataRef struct {
	// Digest of an artifact ("sha256:..."); set this or Dataset.
	Digest string `json:"digest,omitempty"`
	// Dataset name ("name:version"); set this or Digest.
	Dataset string `json:"dataset,omitempty"`
	// Bytes is the size to move when the data is not already there.
	Bytes int64 `json:"bytes"`
}

func (r DataRef) key() string {
	if r.Digest != "" {
		return r.Digest
	}
	return datasetKey(r.Dataset)
}

func datasetKey(name string) string { return "dataset:" + name }

// Request is what a policy asks the engine to place. The agent builds one
// from a parsed policy document.
type Request struct {
	// Kind is Inference or Training.
	Kind Kind
	// Key is the policy's identity ("InferenceService/fraud-scorer"); it is
	// only echoed into the decision.
	Key string
	// Replicas is the number of inference replicas (per client site when
	// PerClientSite); zero means 1. For Training it is the gang size when
	// Gang.Nodes is zero.
	Replicas int
	// PerClientSite places Replicas for each client site separately, each
	// on the best node for that site alone.
	PerClientSite bool
	// SiteReplicas, with PerClientSite, is the replica count of each
	// client site it names (an autoscaled service's, by where its load
	// comes from); the sites it does not name take Replicas.
	SiteReplicas map[string]int
	// Resources is what each replica or gang member needs.
	Resources Resources
	// Latency is the RTT SLO from the clients.
	Latency Latency
	// Tiers is the tier preference order; the engine falls back to the next
	// tier only for what the previous one could not hold. Empty means every
	// tier, with no preference.
	Tiers []string
	// Spread spreads inference replicas across sites or regions.
	Spread Spread
	// Constraints are hard CEL requirements.
	Constraints []Constraint
	// Affinities are weighted CEL preferences.
	Affinities []Affinity
	// Gang describes a training gang (Kind Training).
	Gang Gang
	// Data is what the workload wants to be near (data gravity).
	Data []DataRef
	// Seed drives tie-breaks: the same seed gives the same decision.
	Seed uint64
	// Exclude lists node IDs (or names) not to place on.
	Exclude []string
}

// ErrInvalidRequest is wrapped by every request validation error.
var ErrInvalidRequest = errors.New("placement: invalid request")

// Validate reports every problem with the request in one error wrapping
// ErrInvalidRequest. Place calls it.
func (r *Request) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}
	switch r.Kind {
	case Inference, Training:
	default:
		bad("kind %q: want %q or %q", r.Kind, Inference, Training)
	}
	if r.Replicas < 0 {
		bad("replicas %d: must not be negative", r.Replicas)
	}
	if r.Resources.CPU < 0 || r.Resources.Memory < 0 || r.Resources.GPUs < 0 || r.Resources.GPUMemory < 0 {
		bad("resources: must not be negative")
	}
	if r.Resources.GPUModel != "" && r.Resources.GPUs == 0 && r.Gang.GPUsPerNode == 0 {
		bad("resources.gpu_model %q needs gpus of at least 1", r.Resources.GPUModel)
	}
	seen := map[string]bool{}
	for _, t := range r.Tiers {
		if t != TierEdge && t != TierOnprem && t != TierCloud {
			bad("tier %q: want edge, onprem or cloud", t)
		}
		if seen[t] {
			bad("tier %q listed twice", t)
		}
		seen[t] = true
	}
	switch r.Spread {
	case SpreadNone, SpreadSite, SpreadRegion:
	default:
		bad("spread %q: want site, region or empty", r.Spread)
	}
	if r.Latency.P99 < 0 {
		bad("latency.p99 %v: must not be negative", r.Latency.P99)
	}
	if r.Latency.P99 > 0 && len(r.Latency.Clients) == 0 {
		bad("latency.p99 needs at least one client site or region")
	}
	if r.PerClientSite && r.Kind == Training {
		bad("perClientSite: only for kind %q", Inference)
	}
	if r.PerClientSite && len(r.Latency.Clients) == 0 {
		bad("perClientSite needs latency.clients")
	}
	if len(r.SiteReplicas) > 0 && !r.PerClientSite {
		bad("siteReplicas: only with perClientSite")
	}
	for site, n := range r.SiteReplicas {
		if n < 1 {
			bad("siteReplicas[%s] %d: must be at least 1", site, n)
		}
		if !slices.Contains(r.Latency.Clients, site) {
			bad("siteReplicas[%s]: not one of latency.clients", site)
		}
	}
	for i, c := range r.Constraints {
		if c == nil {
			bad("constraints[%d]: nil", i)
		}
	}
	for i, a := range r.Affinities {
		if a.Expr == nil {
			bad("affinities[%d]: nil expression", i)
		}
		if a.Weight < 0 {
			bad("affinities[%d]: weight %v must not be negative", i, a.Weight)
		}
	}
	if r.Gang.Nodes < 0 || r.Gang.GPUsPerNode < 0 {
		bad("gang: must not be negative")
	}
	if r.Kind == Inference && (r.Gang.Nodes > 0 || r.Gang.SameFabric) {
		bad("gang: only for kind %q", Training)
	}
	for i, d := range r.Data {
		if (d.Digest == "") == (d.Dataset == "") {
			bad("data[%d]: set exactly one of digest and dataset", i)
		}
		if d.Bytes < 0 {
			bad("data[%d]: bytes must not be negative", i)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidRequest, errors.Join(errs...))
}

// replicas is the number of placements per group.
func (r *Request) replicas() int {
	if r.Kind == Training {
		if r.Gang.Nodes > 0 {
			return r.Gang.Nodes
		}
	}
	if r.Replicas <= 0 {
		return 1
	}
	return r.Replicas
}

// ReplicasFor is the number of replicas of client group client: its
// SiteReplicas count, else Replicas (at least 1). client is "" for the
// one group of a request not placed per client site.
func (r *Request) ReplicasFor(client string) int {
	if n, ok := r.SiteReplicas[client]; ok && client != "" && r.Kind == Inference {
		return n
	}
	return r.replicas()
}

// member is what each placement needs.
func (r *Request) member() Resources {
	m := r.Resources
	if r.Kind == Training && r.Gang.GPUsPerNode > 0 {
		m.GPUs = r.Gang.GPUsPerNode
	}
	return m
}

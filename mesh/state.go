package mesh

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/internal/intern"
)

// Tiers a node can belong to.
const (
	TierEdge   = "edge"
	TierOnprem = "onprem"
	TierCloud  = "cloud"
)

// ValidTier reports whether t is one of the tiers strata knows.
func ValidTier(t string) bool {
	return t == TierEdge || t == TierOnprem || t == TierCloud
}

// Sources of a capability: where the agent learned it.
const (
	SourceNVML     = "nvml"     // discovered through NVIDIA's management library
	SourceSysfs    = "sysfs"    // read from /sys (RDMA) or /proc
	SourceDeclared = "declared" // declared in the agent's configuration
	SourceRuntime  = "runtime"  // read from the Go runtime (arch, OS, cores)
)

// NodeState is the replicated document one node writes about itself. Only its
// own node changes it; every change bumps Version, and everywhere the higher
// version wins. All sizes are bytes, CPU is in millicores.
type NodeState struct {
	// ID derives from the node's identity key (see Identity.ID).
	ID string `json:"id"`
	// Name is unique in the mesh; memberlist knows the node by it.
	Name string `json:"name"`
	// Version orders the documents of one node. It never goes back, also
	// across restarts.
	Version uint64 `json:"version"`
	// Tier is edge, onprem or cloud.
	Tier string `json:"tier"`
	// Site is the site (one gossip pool) the node belongs to.
	Site string `json:"site"`
	// Region groups sites.
	Region string `json:"region"`
	// Labels are the operator's labels.
	Labels map[string]string `json:"labels"`
	// Addrs are the node's advertised addresses.
	Addrs Addrs `json:"addrs"`
	// Capabilities is what the host can do.
	Capabilities Capabilities `json:"capabilities"`
	// Load is what the host has free now.
	Load Load `json:"load"`
	// Locality lists what data the node holds.
	Locality Locality `json:"locality"`
	// Coord is the node's Vivaldi coordinate, as last published.
	Coord *coordinate.Coordinate `json:"coord,omitempty"`
	// Started is when the agent process started.
	Started time.Time `json:"started"`
	// Updated is when the node wrote this version.
	Updated time.Time `json:"updated"`
	// Controller is true when the node may own policies (place and
	// reconcile them). By default onprem and cloud nodes are controllers.
	Controller bool `json:"controller"`
	// Models are the model versions this node serves ("name@version").
	Models []string `json:"models,omitempty"`
	// Replicas say, per inference policy assigned here, whether its model
	// is loading, serving or failed to load (and why).
	Replicas []Replica `json:"replicas,omitempty"`
	// Standbys are the model versions loaded here as warm standbys
	// ("name@version"), serving no one while a replica answers: forwarding
	// tries them after every replica (see InferenceService warm).
	Standbys []string `json:"standbys,omitempty"`
	// Traffic is how busy each model served here is, per model version,
	// as last published: rate-limited, and empty while nothing is served.
	// Forwarding reads it to spread requests by load.
	Traffic []ModelTraffic `json:"traffic,omitempty"`
	// Assignments are the placements this node has admitted or refused.
	Assignments []Assignment `json:"assignments,omitempty"`
	// Leaving is set in the last document a node writes before it leaves
	// gracefully, so peers can tell "left" from "failed".
	Leaving bool `json:"leaving,omitempty"`
	// Schema is the schema of what this node writes ("MAJOR.MINOR";
	// empty for 1.0), and Build its agent's version; a rolling upgrade is
	// done when every member reports the new ones.
	Schema string `json:"schema,omitempty"`
	Build  string `json:"build,omitempty"`

	// Sig is the node's signature of the document and Cert its
	// certificate (DER), in a mesh with Trust; they stay the last members
	// (see sigKey). Clone leaves them out: a copy is for reading or
	// editing, and the mesh signs what it sends.
	Sig  []byte `json:"sig,omitempty"`
	Cert []byte `json:"cert,omitempty"`

	// raw is the document as received or signed, sent on unchanged.
	raw []byte
	// got is when this node took this version (merged a peer's, or wrote
	// its own); zero for one read from the store at start.
	got time.Time
	// index indexes Assignments and Replicas by policy, for a document
	// the mesh holds (nil in a copy to change: see Clone).
	index *docIndex
}

// docIndex is a held document's Assignments and Replicas by policy key,
// each built at its first lookup. A controller asks each node's answer
// and replica for each policy it owns on every pass: a scan of lists of
// thousands for each was a tenth of an idle agent's CPU at 10,000
// policies, and an index of their own for each pass most of its
// allocation.
type docIndex struct {
	assign, replica keyIndex
}

// keyIndex is a list's positions by key, built once: none where the list
// is sorted by key (as agents write theirs), searched then; a map else.
// A serving node's document lists thousands, and every agent held a map
// of each.
type keyIndex struct {
	once   sync.Once
	sorted bool
	at     map[string]int
}

// Assignment returns this node's answer to the placement of policy key
// (the first listed).
func (s *NodeState) Assignment(key string) (Assignment, bool) {
	var ix *keyIndex
	if s.index != nil {
		ix = &s.index.assign
	}
	return find(ix, s.Assignments, key, func(as Assignment) string { return as.Key }, false)
}

// Replica returns what this node reports of its replica of policy key
// (the last listed).
func (s *NodeState) Replica(key string) (Replica, bool) {
	var ix *keyIndex
	if s.index != nil {
		ix = &s.index.replica
	}
	return find(ix, s.Replicas, key, func(r Replica) string { return r.Policy }, true)
}

// find returns the item of list whose key is key, the last of them if
// last, else the first: from ix, built at the first call, where list is
// a held document's (never changed), else by a scan.
func find[T any](ix *keyIndex, list []T, key string, keyOf func(T) string, last bool) (T, bool) {
	var zero T
	if ix != nil {
		ix.once.Do(func() {
			ix.sorted = slices.IsSortedFunc(list, func(a, b T) int { return strings.Compare(keyOf(a), keyOf(b)) })
			if ix.sorted {
				return
			}
			ix.at = make(map[string]int, len(list))
			for i, v := range list {
				if _, dup := ix.at[keyOf(v)]; last || !dup {
					ix.at[keyOf(v)] = i
				}
			}
		})
		if ix.sorted {
			i, found := slices.BinarySearchFunc(list, key, func(v T, k string) int { return strings.Compare(keyOf(v), k) })
			if !found {
				return zero, false
			}
			for last && i+1 < len(list) && keyOf(list[i+1]) == key {
				i++
			}
			return list[i], true
		}
		if i, ok := ix.at[key]; ok {
			return list[i], true
		}
		return zero, false
	}
	for i := range list {
		j := i
		if last {
			j = len(list) - 1 - i
		}
		if keyOf(list[j]) == key {
			return list[j], true
		}
	}
	return zero, false
}

// Replica states.
const (
	ReplicaLoading = "loading"
	ReplicaServing = "serving"
	ReplicaFailed  = "failed"
)

// Replica is one inference policy's model on this node.
type Replica struct {
	// Policy is the policy key; Model the version it should serve
	// ("name@version").
	Policy string `json:"policy"`
	Model  string `json:"model"`
	// State is loading, serving or failed; Reason says why it failed (the
	// ONNX Runtime or pull error), Since when the state began.
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// Attempts counts failed loads in a row; the next is tried after a
	// backoff that doubles with each (5s to 5 minutes).
	Attempts int `json:"attempts,omitempty"`
}

// ModelTraffic is how busy one model version served on a node is.
type ModelTraffic struct {
	// Model is "name@version".
	Model string `json:"model"`
	// RPS is the requests per second answered since the last report.
	RPS float64 `json:"rps"`
	// Inflight is the requests being handled when the report was written.
	Inflight int64 `json:"inflight"`
	// P50 and P99 are the handling times, in milliseconds, of the requests
	// answered in the last 30 seconds; zero when none were.
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	// Sites is RPS by the client site the requests came from: the site
	// of the agent that forwarded them here, or this node's own for those
	// made at its API. Requests from no known site are in none. At most
	// MaxTrafficSites sites, the busiest.
	Sites map[string]float64 `json:"sites,omitempty"`
}

// MaxTrafficSites bounds ModelTraffic.Sites.
const MaxTrafficSites = 16

// Equal says whether t and o report the same figures.
func (t ModelTraffic) Equal(o ModelTraffic) bool {
	return t.Model == o.Model && t.RPS == o.RPS && t.Inflight == o.Inflight && t.P50 == o.P50 && t.P99 == o.P99 && maps.Equal(t.Sites, o.Sites)
}

// Addrs are the addresses a node advertises.
type Addrs struct {
	// Gossip is the memberlist address (host:port).
	Gossip string `json:"gossip"`
	// API is the HTTP API address (host:port).
	API string `json:"api"`
	// Data is the data-plane (QUIC) address, empty until it is enabled.
	Data string `json:"data,omitempty"`
	// Federation are the libp2p multiaddrs (with /p2p/ID) the node listens
	// at while it is one of its site's gateways; empty where federation is
	// off.
	Federation []string `json:"federation,omitempty"`
}

// Capabilities is what a host can do, with where each part was learned.
type Capabilities struct {
	CPU    CPU    `json:"cpu"`
	Memory Memory `json:"memory"`
	OS     string `json:"os"`
	// GPUs lists the host's GPUs, from NVML or declared in config.
	GPUs []GPU `json:"gpus"`
	// GPUSource says where GPUs came from (nvml, declared) or why there are
	// none ("none: NVML absent").
	GPUSource string `json:"gpu_source"`
	// RDMA lists the host's RDMA devices.
	RDMA []RDMADevice `json:"rdma"`
	// Fabric is the RDMA fabric ID the host is attached to, "" for none. Hosts
	// with the same fabric ID can run one training gang.
	Fabric string `json:"fabric,omitempty"`
}

// CPU describes the host's processors.
type CPU struct {
	// Cores is the number of logical CPUs.
	Cores int `json:"cores"`
	// Millicores is Cores × 1000, what placement reasons in.
	Millicores int64 `json:"millicores"`
	// Arch is the Go architecture name (amd64, arm64).
	Arch string `json:"arch"`
	// Model is the processor's model name, when known.
	Model  string `json:"model,omitempty"`
	Source string `json:"source"`
}

// Memory is the host's memory.
type Memory struct {
	// Total is the host's memory in bytes.
	Total  int64  `json:"total"`
	Source string `json:"source"`
}

// GPU is one GPU.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	Model string `json:"model"`
	// Memory is the device memory in bytes.
	Memory int64 `json:"memory"`
	// MIG is true when MIG mode is enabled.
	MIG bool `json:"mig"`
	// Healthy is false when the device reported an error.
	Healthy bool   `json:"healthy"`
	Source  string `json:"source"`
	// NVLinkPeers lists the indexes of GPUs this one has NVLink to.
	NVLinkPeers []int `json:"nvlink_peers,omitempty"`
}

// RDMADevice is one RDMA port.
type RDMADevice struct {
	// Name is the device name (mlx5_0).
	Name string `json:"name"`
	Port int    `json:"port"`
	// LinkLayer is InfiniBand or Ethernet (RoCE).
	LinkLayer string `json:"link_layer"`
	// Rate is the link rate as the kernel prints it ("400 Gb/sec (4X NDR)").
	Rate string `json:"rate,omitempty"`
	// State is the port state (ACTIVE, DOWN).
	State string `json:"state,omitempty"`
	// Fabric is the fabric ID: the subnet prefix of the port's first GID, or
	// declared.
	Fabric string `json:"fabric,omitempty"`
	Source string `json:"source"`
}

// Load is what a node has free now.
type Load struct {
	// FreeCPU is unreserved CPU in millicores.
	FreeCPU int64 `json:"free_cpu"`
	// FreeMemory is unreserved memory in bytes.
	FreeMemory int64 `json:"free_memory"`
	// FreeGPUs is the number of GPUs no workload holds.
	FreeGPUs int `json:"free_gpus"`
	// Workloads is the number of workloads running.
	Workloads int `json:"workloads"`
	// QPS is the inference requests per second served, averaged.
	QPS float64 `json:"qps"`
}

// Assignment is a node's answer to a placement that names it: admitted
// against its own ledger of free resources, or refused with the reason.
type Assignment struct {
	// Key is the policy ("InferenceService/fraud-scorer").
	Key string `json:"key"`
	// Epoch is the placement's epoch the answer is for.
	Epoch uint64 `json:"epoch"`
	// Accepted is true when the node took the assignment.
	Accepted bool `json:"accepted"`
	// Reason says why a refused assignment was refused.
	Reason string `json:"reason,omitempty"`
	// CPU (millicores), Memory (bytes) and GPUs (indexes) it holds.
	CPU    int64 `json:"cpu,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	GPUs   []int `json:"gpus,omitempty"`
}

// Locality is what data a node holds.
type Locality struct {
	// Artifacts are the digests of artifacts (models, datasets) held.
	Artifacts []string `json:"artifacts,omitempty"`
	// Datasets are dataset names (name:version) held.
	Datasets []string `json:"datasets,omitempty"`
	// Pulling are the digests of artifacts this node is downloading. It
	// serves their verified chunks to other pullers, so agents fetching
	// the same model at once help each other instead of all asking the
	// origin.
	Pulling []string `json:"pulling,omitempty"`
}

// shared is s without its signature and encoding, sharing its slices and
// maps: for a reader of a document the mesh holds (see Nodes).
func (s *NodeState) shared() NodeState {
	c := *s
	c.Sig, c.Cert, c.raw = nil, nil, nil
	return c
}

// Clone returns a deep copy.
func (s NodeState) Clone() NodeState {
	c := s
	c.Labels = maps.Clone(s.Labels)
	c.Capabilities.GPUs = slices.Clone(s.Capabilities.GPUs)
	for i := range c.Capabilities.GPUs {
		c.Capabilities.GPUs[i].NVLinkPeers = slices.Clone(s.Capabilities.GPUs[i].NVLinkPeers)
	}
	c.Capabilities.RDMA = slices.Clone(s.Capabilities.RDMA)
	c.Addrs.Federation = slices.Clone(s.Addrs.Federation)
	c.Models = slices.Clone(s.Models)
	c.Replicas = slices.Clone(s.Replicas)
	c.Standbys = slices.Clone(s.Standbys)
	c.Traffic = slices.Clone(s.Traffic)
	for i := range c.Traffic {
		c.Traffic[i].Sites = maps.Clone(s.Traffic[i].Sites)
	}
	c.Assignments = slices.Clone(s.Assignments)
	for i := range c.Assignments {
		c.Assignments[i].GPUs = slices.Clone(s.Assignments[i].GPUs)
	}
	c.Locality.Artifacts = slices.Clone(s.Locality.Artifacts)
	c.Locality.Pulling = slices.Clone(s.Locality.Pulling)
	c.Locality.Datasets = slices.Clone(s.Locality.Datasets)
	if s.Coord != nil {
		c.Coord = s.Coord.Clone()
	}
	c.Sig, c.Cert, c.raw, c.index = nil, nil, nil, nil
	return c
}

// newer reports whether a should replace b: same node and a higher version.
func newer(a, b *NodeState) bool {
	if b == nil || a.Version > b.Version {
		return true
	}
	// The same version relayed by an agent from before schemas lost the
	// fields that agent did not know (it decoded and re-encoded the
	// document); the writer's own copy, with its schema, completes it.
	return a.Version == b.Version && b.Schema == "" && a.Schema != ""
}

// encodeState returns the document as received or signed, else encodes it.
func encodeState(s *NodeState) ([]byte, error) {
	if s.raw != nil {
		return s.raw, nil
	}
	return json.Marshal(s)
}

// peekState reads a document's ID and version from the first keys of its
// JSON, as encodeState writes them (the struct's order), without decoding
// the rest; ok is false when they are not the first keys.
func peekState(b []byte) (id string, version uint64, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", 0, false
	}
	var haveID, haveVersion bool
	for range 3 {
		k, err := dec.Token()
		if err != nil {
			return "", 0, false
		}
		v, err := dec.Token()
		if err != nil {
			return "", 0, false
		}
		switch k {
		case "id":
			id, haveID = v.(string)
		case "version":
			n, isNum := v.(json.Number)
			if !isNum {
				return "", 0, false
			}
			u, err := strconv.ParseUint(string(n), 10, 64)
			if err != nil {
				return "", 0, false
			}
			version, haveVersion = u, true
		case "name":
			if _, isStr := v.(string); !isStr {
				return "", 0, false
			}
		default:
			return "", 0, false
		}
		if haveID && haveVersion {
			return id, version, true
		}
	}
	return "", 0, false
}

// decodeState decodes a document and keeps its bytes (b is not copied).
// shareStrings makes s, a document decoded from a peer and not yet
// shared, hold once what it repeats: a replica's policy is its
// assignment's key, and the models, states and reasons that many
// replicas and answers share come from set. At 10,000 policies a peer's
// document lists thousands of each, and their strings were most of what
// the documents held in memory. Its longest lists are clipped.
func (s *NodeState) shareStrings(set *intern.Strings) {
	for i := range s.Assignments {
		s.Assignments[i].Reason = set.Get(s.Assignments[i].Reason)
	}
	for i := range s.Replicas {
		r := &s.Replicas[i]
		if as, ok := s.Assignment(r.Policy); ok {
			r.Policy = as.Key
		}
		r.Model, r.State, r.Reason = set.Get(r.Model), set.Get(r.State), set.Get(r.Reason)
	}
	s.Assignments, s.Replicas = clipped(s.Assignments), clipped(s.Replicas)
}

// clipped is v in an array of its length where json's growth (by half
// again) left an eighth of it or more unused: a document is held until
// its node writes the next one.
func clipped[T any](v []T) []T {
	if cap(v)-len(v) > len(v)/8 {
		return slices.Clone(v)
	}
	return v
}

// dropRaw forgets the bytes s was decoded from where s encodes back to
// those very bytes: encodeState encodes it again to relay it. The
// documents of nodes that serve thousands of replicas were held twice,
// as bytes and decoded. A document that does not encode back to its bytes
// (fields of a later schema, another encoder's spacing) keeps them, to
// relay them as signed.
func (s *NodeState) dropRaw() {
	if s.raw == nil {
		return
	}
	if b, err := json.Marshal(s); err == nil && bytes.Equal(b, s.raw) {
		s.raw = nil
	}
}

func decodeState(b []byte) (*NodeState, error) {
	var s NodeState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	s.raw = b
	s.index = &docIndex{}
	return &s, nil
}

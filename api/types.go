package api

import "time"

// Tiers of a node.
const (
	TierEdge   = "edge"
	TierOnPrem = "onprem"
	TierCloud  = "cloud"
)

// Status is a member's liveness as the answering agent sees it.
type Status string

// Member statuses.
const (
	StatusAlive   Status = "alive"   // answering probes
	StatusSuspect Status = "suspect" // missed probes; others are asked to confirm
	StatusFailed  Status = "failed"  // declared dead by the failure detector
	StatusLeft    Status = "left"    // left gracefully
	StatusUnknown Status = "unknown" // known from the store, not heard from yet
	// StatusUnreachable: failed, and so is every other node of its site;
	// the site is cut off (or all of it is down), see Site.
	StatusUnreachable Status = "unreachable"
)

// Health is the answer of GET /v1/health.
type Health struct {
	// Status is "ok", or "degraded" when the agent knows other members
	// but reaches none of them, or reaches none outside its own site
	// while other sites are known (cut off). Either way the agent still
	// serves what it holds, so the HTTP status stays 200.
	Status string `json:"status"`
	// Reasons says why the status is degraded.
	Reasons []string `json:"reasons,omitempty"`
	// Node and ID name the answering agent's node.
	Node string `json:"node"`
	ID   string `json:"id"`
	// AliveMembers counts the members of its site it sees alive, itself
	// included.
	AliveMembers int `json:"alive_members"`
}

// Member is one node of the site as the membership layer sees it (GET
// /v1/members).
type Member struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Status Status `json:"status"`
	Tier   string `json:"tier"`
	Site   string `json:"site"`
	// Schema is the schema of what the node writes ("MAJOR.MINOR"; empty
	// for an agent before schemas were recorded, 1.0), Build its agent's
	// version. A rolling upgrade is done when every member reports the
	// new ones.
	Schema string `json:"schema,omitempty"`
	Build  string `json:"build,omitempty"`
}

// Site reachability (Site.Status).
const (
	SiteReachable   = "reachable"   // some node of the site is alive
	SiteUnreachable = "unreachable" // no node of the site answers: cut off, or all down
	SiteGone        = "gone"        // every node of the site left
)

// Site is one site's summary as the answering agent sees it (GET
// /v1/sites). An unreachable site's replicas stay where they are: its
// clients are cut off with it.
type Site struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	Nodes  int    `json:"nodes"`
	Alive  int    `json:"alive"`
	Status string `json:"status"`
	// Via is "pool" (this agent sees the site's nodes) or "federation"
	// (it knows the site from its gateways' summaries, last at Heard).
	// A pool site with an alive node has Heard too: the time of the
	// answer, since membership hears from its alive nodes all the time.
	Via   string     `json:"via"`
	Heard *time.Time `json:"heard,omitempty"`
	// RTTMillis is the round trip in milliseconds from the answering
	// agent's site to this one. For a federation site: the median of its
	// site's publishing gateway's last pings to it, where it pinged it in
	// the last 2 minutes, else the estimate from the sites' WAN
	// coordinates (Vivaldi, from those pings); absent until either is
	// known. For a pool site: the estimate from the answering agent's
	// Vivaldi coordinate to that of the site's nearest alive node (0 for
	// its own site); absent until one has a coordinate. Absent while the
	// site is unreachable.
	RTTMillis *float64 `json:"rtt_ms,omitempty"`
	// Path is how the answering agent's site's publishing gateway last
	// reached this site's gateways, where it pinged them in the last 2
	// minutes: "direct" (hole punching included) or "relayed" (through
	// another agent's circuit relay). Federation only.
	Path string `json:"path,omitempty"`
}

// Site.Via values.
const (
	ViaPool       = "pool"
	ViaFederation = "federation"
)

// Site.Path values.
const (
	PathDirect  = "direct"
	PathRelayed = "relayed"
)

// Node is a node's replicated document with its current status (GET
// /v1/nodes, GET /v1/nodes/{id}, GET /v1/agent/self).
type Node struct {
	// ID derives from the node's identity key.
	ID string `json:"id"`
	// Name is unique in the mesh.
	Name string `json:"name"`
	// Version orders the documents of one node; it never goes back.
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
	// Coord is the node's Vivaldi coordinate, as last published; nil
	// before the first.
	Coord *Coordinate `json:"coord,omitempty"`
	// Started is when the agent process started.
	Started time.Time `json:"started"`
	// Updated is when the node wrote this version.
	Updated time.Time `json:"updated"`
	// Controller is true when the node may own policies.
	Controller bool `json:"controller"`
	// Models are the model versions this node serves ("name@version").
	Models []string `json:"models,omitempty"`
	// Replicas say, per inference policy assigned to the node, whether its
	// model is loading, serving or failed to load (and why).
	Replicas []Replica `json:"replicas,omitempty"`
	// Standbys are the model versions loaded on the node as warm standbys
	// ("name@version"), answering only when no replica does.
	Standbys []string `json:"standbys,omitempty"`
	// Traffic is how busy each model served on the node is, as last
	// reported (every few seconds while it changes).
	Traffic []ModelTraffic `json:"traffic,omitempty"`
	// Assignments are the placements this node has admitted or refused.
	Assignments []Assignment `json:"assignments,omitempty"`
	// Leaving is set in the last document a node writes before it leaves.
	Leaving bool `json:"leaving,omitempty"`
	// Sig and Cert are the node's signature and certificate as gossiped;
	// API answers leave them out.
	Sig  []byte `json:"sig,omitempty"`
	Cert []byte `json:"cert,omitempty"`
	// Schema is the schema of what the node writes ("MAJOR.MINOR"; empty
	// for 1.0) and Build its agent's version (see Member).
	Schema string `json:"schema,omitempty"`
	Build  string `json:"build,omitempty"`
	// Status is the node's liveness as the answering agent sees it.
	Status Status `json:"status"`
}

// Addrs are the addresses a node advertises (host:port each).
type Addrs struct {
	// Gossip is the memberlist address.
	Gossip string `json:"gossip"`
	// API is the HTTP API address.
	API string `json:"api"`
	// Data is the data-plane (QUIC) address, empty until it is enabled.
	Data string `json:"data,omitempty"`
	// Federation are the libp2p addresses (with /p2p/PEER-ID) the node
	// listens at while it is a federation gateway.
	Federation []string `json:"federation,omitempty"`
}

// Capabilities is what a host can do, with where each part was learned.
type Capabilities struct {
	CPU    CPU    `json:"cpu"`
	Memory Memory `json:"memory"`
	OS     string `json:"os"`
	// GPUs lists the host's GPUs, from NVML or declared in config.
	GPUs []GPU `json:"gpus"`
	// GPUSource says where GPUs came from (nvml, declared) or why there
	// are none.
	GPUSource string `json:"gpu_source"`
	// RDMA lists the host's RDMA ports.
	RDMA []RDMADevice `json:"rdma"`
	// Fabric is the RDMA fabric ID the host is attached to, "" for none.
	Fabric string `json:"fabric,omitempty"`
}

// CPU describes the host's processors.
type CPU struct {
	// Cores is the number of logical CPUs.
	Cores int `json:"cores"`
	// Millicores is Cores × 1000.
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
	// Rate is the link rate as the kernel prints it.
	Rate string `json:"rate,omitempty"`
	// State is the port state (ACTIVE, DOWN).
	State string `json:"state,omitempty"`
	// Fabric is the fabric ID.
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
	// Sites is RPS by the client site the requests came from (the
	// forwarding agent's site, or the node's own), the busiest 16.
	Sites map[string]float64 `json:"sites,omitempty"`
}

// Assignment is a node's answer to a placement that names it.
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
	// Artifacts are the digests of artifacts held.
	Artifacts []string `json:"artifacts,omitempty"`
	// Datasets are dataset names (name:version) held.
	Datasets []string `json:"datasets,omitempty"`
	// Pulling are the digests of artifacts the node is downloading.
	Pulling []string `json:"pulling,omitempty"`
}

// Coordinate is a Vivaldi network coordinate (serf's coordinate package;
// its JSON names are the Go field names).
type Coordinate struct {
	Vec        []float64 `json:"Vec"`
	Error      float64   `json:"Error"`
	Adjustment float64   `json:"Adjustment"`
	Height     float64   `json:"Height"`
}

// RTT is the answer of GET /v1/rtt: the estimated round-trip time between
// two nodes.
type RTT struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Millis is the estimate in milliseconds.
	Millis float64 `json:"rtt_ms"`
}

// Duration is the estimate as a time.Duration.
func (r RTT) Duration() time.Duration { return time.Duration(r.Millis * float64(time.Millisecond)) }

// Replica is one inference policy's model on a node.
type Replica struct {
	Policy string `json:"policy"`
	Model  string `json:"model"`
	// State is loading, serving or failed; Reason says why it failed.
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts,omitempty"`
}

package policy

// Node is the view of one node that policy expressions (constraints and
// affinities, written in CEL) see as the variable `node`. Field names in CEL
// are the `cel` tags: `node.tier == "edge" && node.gpus.exists(g, g.memory >= 16 * GiB)`.
//
// Node is a plain value: the placement engine fills one per candidate node from
// its snapshot. Byte sizes are in bytes, CPU in millicores, RTT in
// milliseconds.
type Node struct {
	// Name is the node's unique name in the mesh.
	Name string `cel:"name"`
	// ID is the node's identity (derived from its ed25519 key).
	ID string `cel:"id"`
	// Tier is one of "edge", "onprem", "cloud".
	Tier string `cel:"tier"`
	// Site is the node's site (one gossip pool).
	Site string `cel:"site"`
	// Region groups sites.
	Region string `cel:"region"`
	// Labels are free-form operator labels.
	Labels map[string]string `cel:"labels"`
	// CPU is the node's total CPU in millicores.
	CPU int64 `cel:"cpu"`
	// Memory is the node's total memory in bytes.
	Memory int64 `cel:"memory"`
	// FreeCPU is unreserved CPU in millicores.
	FreeCPU int64 `cel:"free_cpu"`
	// FreeMemory is unreserved memory in bytes.
	FreeMemory int64 `cel:"free_memory"`
	// Arch is the CPU architecture as Go names it (amd64, arm64).
	Arch string `cel:"arch"`
	// GPUs lists the node's GPUs.
	GPUs []GPU `cel:"gpus"`
	// Fabric is the RDMA fabric ID the node is attached to, "" if none.
	Fabric string `cel:"fabric"`
	// RTT maps a client site or region name to the predicted round-trip
	// time from it to this node, in milliseconds. Only the sites and regions
	// the policy names are present.
	RTT map[string]float64 `cel:"rtt"`
}

// GPU is one GPU as policy expressions see it, and as the placement
// engine takes it (placement.GPU is this type).
type GPU struct {
	// Model is the product name, for example "NVIDIA H100 80GB HBM3".
	Model string `json:"model" cel:"model"`
	// Memory is the GPU's memory in bytes.
	Memory int64 `json:"memory" cel:"memory"`
	// Healthy is false when the device reported an error or is unreachable.
	Healthy bool `json:"healthy" cel:"healthy"`
	// Free is true when no workload holds the GPU.
	Free bool `json:"free" cel:"free"`
}

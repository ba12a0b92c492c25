package catalog

// The types below are parts of records that other packages compute: the
// catalog owns their JSON (testdata/wire.golden pins it), so that a change
// to a domain type does not change what agents of other versions read.
// The packages that write them convert (meshview for placement).

// Reason is why the placement engine filtered a node out
// (placement.Reason's values: "insufficient_cpu", "latency_slo", …).
type Reason string

// Fallback is a placement group that fell short of its preferred tier
// (placement.Fallback).
type Fallback struct {
	// Client is the client site of a per-client-site group, else "".
	Client string `json:"client,omitempty"`
	// Tier is the tier that fell short.
	Tier string `json:"tier"`
	// Reason is the main reason it fell short.
	Reason Reason `json:"reason"`
	// Message says it for people.
	Message string `json:"message"`
}

// Resources is what each placed replica or gang member holds on its node
// (placement.Resources, which converts to and from it).
type Resources struct {
	// CPU in millicores.
	CPU int64 `json:"cpu,omitempty"`
	// Memory in bytes.
	Memory int64 `json:"memory,omitempty"`
	// GPUs is the number of whole GPUs.
	GPUs int `json:"gpus,omitempty"`
	// GPUModel, when set, is matched case-insensitively as a substring of
	// a GPU's model name.
	GPUModel string `json:"gpu_model,omitempty"`
	// GPUMemory is the least memory in bytes each GPU must have.
	GPUMemory int64 `json:"gpu_memory,omitempty"`
}

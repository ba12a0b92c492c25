// Package agent is one strata daemon: it wires the local store, the node's
// identity, host discovery, the mesh, the catalog and the components under
// internal/ (controller, serving, drift watch, jobs, events, artifacts, the
// HTTP API) together, and owns their lifecycle. It holds no logic of its
// own beyond that; see docs/architecture.md for the map.
//
//	cfg := agent.DefaultConfig()
//	cfg.Tier, cfg.Site = "edge", "shop-17"
//	a, err := agent.New(cfg)
//	if err != nil { ... }
//	err = a.Run(ctx) // serves until ctx ends, then leaves the mesh
//
// DevConfigs builds the configurations of `strata dev`: a multi-tier mesh of
// agents in one process on loopback.
package agent

// Package agent is one strata daemon: it wires the local store, the node's
// identity, host discovery, the mesh and the HTTP API together, and owns
// their lifecycle.
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

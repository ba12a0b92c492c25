// Package api holds the wire types of a strata agent's HTTP API (under
// /v1): what each endpoint answers, as plain structs with the JSON names
// the agent sends. It imports nothing of the agent, so a program that
// only talks to agents does not pull in the mesh, the store or ONNX
// Runtime.
//
// The client in package api/client returns these types:
//
//	c := client.New("127.0.0.1:7470")
//	nodes, err := c.Nodes(ctx, client.NodeFilter{Tier: api.TierEdge})
//	for _, n := range nodes {
//		fmt.Println(n.Name, n.Status, n.Capabilities.CPU.Cores)
//	}
//
// Sizes are bytes, CPU is millicores and times are RFC 3339, as on the
// wire. A field the agent adds later is ignored by older clients.
package api

// Package catalog is the mesh's shared state as typed tables: one Go type,
// key function and scope per record kind, over the replicated key-value
// catalog that package mesh gossips.
//
// Every record carries its writer, a version (a hybrid timestamp: the
// writer's microseconds, bumped past the key's previous version) and the
// records it was derived from, each at the version its writer read. A reader
// that holds an older version of a dependency than the record names is
// looking at replication lag, not at an error: Table.Pending says so, and
// WaitFor waits for the dependency with a bound. A value that does not decode
// is returned as a *DecodeError and counted, never dropped in silence.
//
//	c := catalog.New(m, reg)            // m is a *mesh.Mesh
//	pol, _ := c.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "fraud"})
//	c.Placements.Put(catalog.Placement{Key: pol.Key}, pol.Ref())
//	for _, rec := range c.Placements.Ready() { ... }   // dependencies replicated
//
// Scopes: site records stay in a site's pool; global records travel to every
// site. Node-scoped state (assignments, locality, load) is not a table: it is
// the node's own document (mesh.NodeState), written only by that node.
//
// Deleted records leave a tombstone that the mesh collects after its TTL
// (mesh.Config.TombstoneTTL), so state stays bounded under churn.
package catalog

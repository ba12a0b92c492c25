// Package arch holds the project's package map as data: which layer each
// package is in. A package may import only packages of lower layers
// (TestImports checks every import against it), and docs/architecture.md
// shows the same map (TestDocs).
package arch

// Layers lists the project's packages, bottom layer first: a package may
// import the packages of the layers below its own, none of its own layer
// or above. A package not listed fails TestImports: add it where it
// belongs, here and in docs/architecture.md.
var Layers = []Layer{
	{"pure: no project imports", []string{
		"internal/arch", "internal/clidoc",
		"policy", "infer/drift", "trainer/onnx", "storage", "mesh/pki", "api", "sweep",
		"internal/safe", "internal/backoff", "internal/intern", "internal/httpjson", "internal/ui", "internal/testbed",
		"mesh/meshtest", "cmd/benchtable", "trainer/internal/orttest", "internal/docrun",
	}},
	{"engines and transports", []string{"placement", "infer", "trainer", "mesh/dataplane", "api/client", "packaging/gendocs", "packaging/releasetest"}},
	{"gossip, simulation", []string{"mesh", "sim"}},
	{"over the mesh", []string{"mesh/federation", "internal/catalog", "internal/catalog/catalogtest", "agent/discover"}},
	{"components over the catalog", []string{"internal/artifacts", "internal/events", "internal/driftwatch", "internal/meshview"}},
	{"components over artifacts", []string{"internal/serving", "internal/jobs"}},
	{"the controller", []string{"internal/controller"}},
	{"the HTTP API", []string{"internal/httpapi"}},
	{"wiring", []string{"agent"}},
	{"the binary", []string{"cmd/strata"}},
}

// Layer is one layer of the package map: what it is, and its packages
// (import paths under the module).
type Layer struct {
	What     string
	Packages []string
}

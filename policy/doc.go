// Package policy owns strata's placement policies: the Kubernetes-shaped YAML
// kinds (InferenceService, TrainingJob), strict parsing with file:line:column
// errors, units as people write them (20ms, 16GiB, 500m), CEL constraints and
// affinities over a typed view of a node, validation and defaults.
//
// Parse reads a file of documents and returns them validated, defaulted and
// with their expressions compiled, or an ErrorList holding every problem in
// the file at once:
//
//	docs, err := policy.Parse("fraud.yaml", data)
//	if err != nil {
//		return err // ErrorList: "fraud.yaml:7:13: spec.replicas: must be at least 1, got 0"
//	}
//	for _, d := range docs {
//		switch {
//		case d.InferenceService != nil: // d.Kind == policy.KindInferenceService
//		case d.TrainingJob != nil: // d.Kind == policy.KindTrainingJob
//		}
//	}
//
// A document built in code goes through the same two steps Parse uses, kept
// apart as pebble keeps EnsureDefaults and Validate: Validate gathers every
// problem (and compiles expressions), SetDefaults fills what was left unset.
//
// Expressions see the variable `node`, a Node, with fields named by their
// `cel` tags. A compiled Expr answers Match (constraints) and Score
// (affinities) for one node at a time, concurrently, without building a map
// or reading fields through reflection: the placement engine calls them for
// every candidate node of a decision.
//
// Document.Key ("InferenceService/fraud-scorer") is a policy's identity; an
// applied policy is stored as Document.Source and parsed again where needed,
// and MarshalJSON gives its canonical JSON for API responses.
//
// The package is pure: it does no I/O and starts no goroutines.
package policy

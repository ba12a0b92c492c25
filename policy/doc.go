// Package policy owns strata's placement policies: the Kubernetes-shaped YAML
// kinds (InferenceService, TrainingJob), strict parsing with file:line:column
// errors, units as people write them (20ms, 16GiB, 500m), CEL constraints and
// affinities over a typed view of a node, validation and defaults.
//
// The package is pure: it does no I/O and starts no goroutines.
package policy

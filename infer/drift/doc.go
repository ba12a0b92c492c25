// Package drift detects distribution shift between a model's reference data
// and what it sees live. It is pure: no I/O, no goroutines, no clock.
package drift

package placement

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Options tunes the engine. The zero value means the documented defaults;
// a negative weight switches that scorer off.
type Options struct {
	// LatencyWeight weighs closeness to the clients (inference and any
	// request with latency clients). Default 2.
	LatencyWeight float64
	// HeadroomWeight weighs the room an inference replica leaves on its
	// node (least allocated first, room to absorb bursts). Default 1.
	HeadroomWeight float64
	// PackWeight weighs bin-packing for training: gang members go to the
	// nodes they fill most, and gangs to the fabric they fill most, so that
	// large gangs still find whole fabrics later. Default 1.
	PackWeight float64
	// DataWeight weighs data gravity: the time to move the request's data.
	// Default 2.
	DataWeight float64
	// DataTimeScale is the transfer time that halves the data score.
	// Default 60s.
	DataTimeScale time.Duration
	// Exhaustive turns the index off: every node is run through every
	// filter, every feasible node is scored and sorted. Decisions are the
	// same; it exists as the reference the tests and benchmarks compare
	// against, and it records every node's reason eagerly.
	Exhaustive bool
	// MaxCandidates bounds how many feasible nodes an inference pass
	// scores, after Nomad's LimitIterator: every node is still filtered
	// (cheap, with node classes), but when more than MaxCandidates pass,
	// only MaxCandidates of them, drawn by the request's seed, are scored
	// and compete for selection; the others count as not selected. Zero
	// (the default) scores every feasible node. Small limits trade
	// placement quality for speed when scoring is dear (many clients,
	// data, affinities); BenchmarkMaxCandidates measures the loss. Gangs
	// are not limited. Must not be negative.
	MaxCandidates int
}

// DefaultOptions returns the defaults, filled in.
func DefaultOptions() Options {
	var o Options
	o.EnsureDefaults()
	return o
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.LatencyWeight == 0 {
		o.LatencyWeight = 2
	}
	if o.HeadroomWeight == 0 {
		o.HeadroomWeight = 1
	}
	if o.PackWeight == 0 {
		o.PackWeight = 1
	}
	if o.DataWeight == 0 {
		o.DataWeight = 2
	}
	if o.DataTimeScale == 0 {
		o.DataTimeScale = 60 * time.Second
	}
}

// Validate reports every problem with the options in one error.
func (o *Options) Validate() error {
	var errs []error
	for name, w := range map[string]float64{"LatencyWeight": o.LatencyWeight, "HeadroomWeight": o.HeadroomWeight, "PackWeight": o.PackWeight, "DataWeight": o.DataWeight} {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			errs = append(errs, fmt.Errorf("placement: %s must be finite", name))
		}
	}
	if o.MaxCandidates < 0 {
		errs = append(errs, fmt.Errorf("placement: MaxCandidates %d must not be negative", o.MaxCandidates))
	}
	if o.DataTimeScale < 0 {
		errs = append(errs, fmt.Errorf("placement: DataTimeScale %v must not be negative", o.DataTimeScale))
	}
	return errors.Join(errs...)
}

// Engine places requests. It holds only its options: it is safe for
// concurrent use and every call is independent.
type Engine struct {
	opts Options
	// legacy runs the engine as it was before node classes and top-C
	// selection (constraints and affinities per node, selection in
	// O(replicas × feasible)); it exists for the benchmarks to measure
	// against.
	legacy bool
}

// New returns an engine with the options, defaults filled in.
func New(opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Engine{opts: opts}, nil
}

var defaultEngine = &Engine{opts: DefaultOptions()}

// Place places req on s with the default options. See Engine.Place.
func Place(s *Snapshot, req *Request) (*Decision, error) {
	return defaultEngine.Place(s, req)
}

// Package sweep is hyperparameter search: a search space of float, int
// and categorical parameters, algorithms that propose the next trial from
// the finished ones (random, grid, and TPE, a model-based search), and the
// median stopping rule for trials that report a metric per step.
//
// It is pure and seeded: the same space, history and seed propose the same
// point. The controller runs the trials as TrainingJobs; this package only
// decides what to try and when to give up on a trial.
//
//	space := sweep.Space{{Name: "lr", Kind: sweep.Float, Min: 1e-4, Max: 1, Log: true}}
//	alg, _ := sweep.New(sweep.TPE, space, 1)
//	p := alg.Next(history) // history: the trials so far, with their values
package sweep

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Parameter kinds.
const (
	Float       = "float"
	Int         = "int"
	Categorical = "categorical"
)

// Param is one dimension of a search space.
type Param struct {
	Name string
	// Kind is Float, Int or Categorical.
	Kind string
	// Min and Max bound a Float or Int parameter (inclusive). Log draws
	// it uniformly in log space (Min must then be positive).
	Min, Max float64
	Log      bool
	// Choices are a Categorical parameter's values.
	Choices []string
}

// Space is a search space: one Param per dimension.
type Space []Param

// ErrSpace is wrapped by every error about a search space.
var ErrSpace = errors.New("sweep: bad search space")

// Validate reports the first problem with s.
func (s Space) Validate() error {
	if len(s) == 0 {
		return fmt.Errorf("%w: no parameters", ErrSpace)
	}
	seen := map[string]bool{}
	for _, p := range s {
		if p.Name == "" || seen[p.Name] {
			return fmt.Errorf("%w: parameter name %q empty or repeated", ErrSpace, p.Name)
		}
		seen[p.Name] = true
		switch p.Kind {
		case Float, Int:
			if !(p.Min <= p.Max) || math.IsInf(p.Min, 0) || math.IsInf(p.Max, 0) {
				return fmt.Errorf("%w: %s: want finite min <= max, got %v and %v", ErrSpace, p.Name, p.Min, p.Max)
			}
			if p.Log && p.Min <= 0 {
				return fmt.Errorf("%w: %s: a log scale needs min > 0, got %v", ErrSpace, p.Name, p.Min)
			}
			if p.Kind == Int && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max)) {
				return fmt.Errorf("%w: %s: an int parameter needs whole bounds, got %v and %v", ErrSpace, p.Name, p.Min, p.Max)
			}
		case Categorical:
			if len(p.Choices) == 0 {
				return fmt.Errorf("%w: %s: no choices", ErrSpace, p.Name)
			}
		default:
			return fmt.Errorf("%w: %s: kind %q: want float, int or categorical", ErrSpace, p.Name, p.Kind)
		}
	}
	return nil
}

// Point is one assignment of a space's parameters, by dimension: a Float
// or Int parameter's value, or a Categorical parameter's choice index.
type Point []float64

// Values formats p as the trial sees it: name → value ("0.0125", "64",
// "adam").
func (s Space) Values(p Point) map[string]string {
	out := make(map[string]string, len(s))
	for i, prm := range s {
		switch prm.Kind {
		case Float:
			out[prm.Name] = strconv.FormatFloat(p[i], 'g', 6, 64)
		case Int:
			out[prm.Name] = strconv.FormatInt(int64(math.Round(p[i])), 10)
		case Categorical:
			out[prm.Name] = prm.Choices[int(p[i])]
		}
	}
	return out
}

// Trial is a finished (or running) trial as the algorithms read it.
type Trial struct {
	Point Point
	// Value is the objective's final value; Done is false while it runs
	// (or when it failed or was stopped early without a value).
	Value float64
	Done  bool
}

// Algorithm names.
const (
	Random = "random"
	Grid   = "grid"
	TPE    = "tpe"
)

// Algorithm proposes the next point to try from the trials so far.
// Implementations are deterministic for a seed and the history given.
type Algorithm interface {
	// Next returns the next point, or ok false when the algorithm has
	// nothing left to try (a grid that is exhausted).
	Next(history []Trial) (p Point, ok bool)
}

// Options tune New. The zero value means the defaults.
type Options struct {
	// Maximize says a larger objective is better (default: smaller).
	Maximize bool
	// GridPoints is how many values a grid takes of a Float or Int
	// parameter. Default 4.
	GridPoints int
	// Startup is how many random trials TPE runs before it models the
	// results. Default 8.
	Startup int
	// Candidates is how many points TPE draws from its model of the good
	// trials to pick the next from. Default 24.
	Candidates int
	// Gamma is the share of trials TPE counts as good. Default 0.25.
	Gamma float64
}

// New returns the named algorithm over space, drawing from seed.
func New(name string, space Space, seed uint64, opts Options) (Algorithm, error) {
	if err := space.Validate(); err != nil {
		return nil, err
	}
	if opts.GridPoints <= 0 {
		opts.GridPoints = 4
	}
	if opts.Startup <= 0 {
		opts.Startup = 8
	}
	if opts.Candidates <= 0 {
		opts.Candidates = 24
	}
	if opts.Gamma <= 0 || opts.Gamma >= 1 {
		opts.Gamma = 0.25
	}
	switch name {
	case Random:
		return &random{space: space, seed: seed}, nil
	case Grid:
		return newGrid(space, opts.GridPoints), nil
	case TPE:
		return &tpe{space: space, seed: seed, opts: opts}, nil
	}
	return nil, fmt.Errorf("sweep: algorithm %q: want random, grid or tpe", name)
}

package infer

import (
	"math/rand"
	"sync"
	"time"
)

// Sample is one row of live traffic: the request's features and the model's
// outputs for that row, each flattened in model input (output) order and
// converted to float64 (BOOL as 0 and 1).
type Sample struct {
	Version string
	Inputs  []float64
	Outputs []float64
}

// sampler keeps a bounded ring of sampled rows for one model, and the
// bucket of requests it samples whatever the fraction.
type sampler struct {
	mu   sync.Mutex
	rows []Sample
	next int
	full bool
	// tokens refill at the floor rate, up to one second's worth; a
	// request that finds one is sampled.
	tokens float64
	last   time.Time
}

// take reports whether a request at now is within the floor rate (per
// second) of requests sampled in full, and counts it.
func (s *sampler) take(now time.Time, floor float64) bool {
	if floor <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() {
		s.tokens = floor
	} else {
		s.tokens = min(floor, s.tokens+now.Sub(s.last).Seconds()*floor)
	}
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

func (s *sampler) add(rows []Sample, capacity int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = make([]Sample, capacity)
	}
	for _, r := range rows {
		s.rows[s.next] = r
		s.next++
		if s.next == len(s.rows) {
			s.next, s.full = 0, true
		}
	}
}

// snapshot returns the rows oldest first.
func (s *sampler) snapshot() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]Sample(nil), s.rows[:s.next]...)
	}
	out := make([]Sample, 0, len(s.rows))
	out = append(out, s.rows[s.next:]...)
	return append(out, s.rows[:s.next]...)
}

// coin decides, with a seeded generator, whether a request is sampled.
type coin struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (c *coin) flip(p float64) bool {
	if p <= 0 {
		return false
	}
	if p >= 1 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64() < p
}

// rowsOf splits a request and its response into per-row samples. Rows are
// the first dimension, which every input and output must share; otherwise
// the request cannot be split and nil is returned.
func rowsOf(ver string, inputs, outputs []Tensor) []Sample {
	if len(inputs) == 0 || len(inputs[0].Shape) == 0 {
		return nil
	}
	n := int(inputs[0].Shape[0])
	if n <= 0 {
		return nil
	}
	for _, ts := range [][]Tensor{inputs, outputs} {
		for _, t := range ts {
			if len(t.Shape) == 0 || int(t.Shape[0]) != n {
				return nil
			}
		}
	}
	flat := func(ts []Tensor) [][]float64 {
		f := make([][]float64, len(ts))
		for i, t := range ts {
			f[i] = float64s(t.Data)
		}
		return f
	}
	in, out := flat(inputs), flat(outputs)
	rows := make([]Sample, n)
	for r := range rows {
		rows[r].Version = ver
		for _, f := range in {
			per := len(f) / n
			rows[r].Inputs = append(rows[r].Inputs, f[r*per:(r+1)*per]...)
		}
		for _, f := range out {
			per := len(f) / n
			rows[r].Outputs = append(rows[r].Outputs, f[r*per:(r+1)*per]...)
		}
	}
	return rows
}

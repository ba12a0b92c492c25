package drift

import (
	"math/rand/v2"
	"testing"
)

// shift describes a synthetic change of one feature's mean.
type shift struct {
	// at is the change point (sample index) where the shift starts.
	at int
	// ramp is the number of samples over which the mean moves linearly to
	// delta; 0 means an abrupt change.
	ramp int
	// delta is the final mean shift in reference standard deviations.
	delta float64
	// feature is the shifted column.
	feature int
	// until, when positive, ends the shift (the stream returns to the
	// reference distribution).
	until int
}

func (s shift) offset(i int) float64 {
	switch {
	case s.delta == 0 || i < s.at || (s.until > 0 && i >= s.until):
		return 0
	case s.ramp > 0 && i < s.at+s.ramp:
		return s.delta * float64(i-s.at+1) / float64(s.ramp)
	}
	return s.delta
}

// testReference summarises features N(0, 1) drawn from a seeded source.
func testReference(tb testing.TB, features, rows int, seed uint64) Reference {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	names := make([]string, features)
	for j := range names {
		names[j] = string(rune('a' + j))
	}
	x := make([]float64, features*rows)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	ref, err := SummarizeColumns(names, x, SummaryOptions{Seed: seed})
	if err != nil {
		tb.Fatal(err)
	}
	return ref
}

// run feeds n rows of a seeded stream with shift s into m and returns every
// event with the sample index (0-based) at which it fired.
func run(tb testing.TB, m *Monitor, n int, s shift, seed uint64, from int) (events []*Event, at []int) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	row := make([]float64, m.Width())
	for i := 0; i < from+n; i++ {
		for j := range row {
			row[j] = rng.NormFloat64()
		}
		if i < from {
			continue // replay the prefix's draws so the stream continues
		}
		row[s.feature] += s.offset(i)
		ev, err := m.Observe(row)
		if err != nil {
			tb.Fatal(err)
		}
		if ev != nil {
			events = append(events, ev)
			at = append(at, i)
		}
	}
	return events, at
}

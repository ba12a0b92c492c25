package drift

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScoresComparedAtAResolution: a confident model's scores, summarised
// in float64 for the reference but served by a runtime that rounds those
// below 3e-8 to 0 and above 1 − 6e-8 to 1, raise no alarm on stable
// traffic: both sides are compared at ScoreResolution.
func TestScoresComparedAtAResolution(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	score := func() float64 { return 1 / (1 + math.Exp(-16*r.NormFloat64())) }
	ref := make([]float64, 2000)
	for i := range ref {
		ref[i] = score()
	}
	pred, err := Summarize("prediction", ref, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	feat, err := Summarize("a", ref, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := func() float64 {
		switch s := score(); {
		case s < 3e-8:
			return 0
		case s > 1-6e-8:
			return 1
		default:
			return s
		}
	}
	for _, det := range []Detector{DetectorKS} {
		m, err := New(Reference{Features: []FeatureReference{feat}, Prediction: &pred}, Config{Detector: det, Window: 200, Every: 40, Prediction: true})
		if err != nil {
			t.Fatal(err)
		}
		alarms, zeros := 0, 0
		for range 50_000 {
			s := served()
			if s == 0 {
				zeros++
			}
			ev, err := m.Observe([]float64{score(), s})
			if err != nil {
				t.Fatal(err)
			}
			if ev != nil && ev.Kind == EventAlarm {
				alarms++
			}
		}
		if alarms > 0 || zeros < 2_000 {
			t.Errorf("%s: %d alarms in 50,000 stable rows (%d scores served as 0); want none", det, alarms, zeros)
		}
	}
}

func TestClampScores(t *testing.T) {
	f := FeatureReference{Name: "p", Count: 10, Min: 1e-20, Max: 1,
		Edges:       []float64{1e-12, 1e-9, 0.2, 0.9, 0.9999999, 0.99999999},
		Proportions: []float64{0.1, 0.1, 0.2, 0.3, 0.1, 0.1, 0.1},
		Sample:      []float64{1e-20, 0.5, 1}}
	got := clampScores(f)
	lo, hi := ScoreResolution, 1-ScoreResolution
	if !slices.Equal(got.Edges, []float64{lo, 0.2, 0.9}) || !slices.Equal(got.Proportions, []float64{0.2, 0.2, 0.3, 0.30000000000000004}) ||
		!slices.Equal(got.Sample, []float64{lo, 0.5, hi}) || got.Min != lo || got.Max != hi {
		t.Errorf("clampScores = edges %v proportions %v sample %v range [%g, %g]", got.Edges, got.Proportions, got.Sample, got.Min, got.Max)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	if f.Sample[0] != 1e-20 || len(f.Edges) != 6 {
		t.Error("clampScores changed its argument")
	}
}

package drift

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestKSStatistic(t *testing.T) {
	tests := []struct {
		name       string
		a, b       []float64
		want       float64
		wantPAbove float64
	}{
		// F_a − F_b is 0.5 on [2, 5).
		{name: "overlap", a: []float64{1, 2, 3, 4}, b: []float64{3, 4, 5, 6}, want: 0.5},
		{name: "disjoint", a: []float64{1, 2}, b: []float64{3, 4, 5}, want: 1},
		{name: "identical", a: []float64{1, 2, 3}, b: []float64{1, 2, 3}, want: 0, wantPAbove: 0.999},
		// Ties: both CDFs step together at 2, so the gap is 1/3 at 1 and
		// 0 from 2 on.
		{name: "ties", a: []float64{1, 2, 2}, b: []float64{2, 2, 2}, want: 1.0 / 3},
		{name: "empty", a: nil, b: []float64{1}, want: 0, wantPAbove: 0.999},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, p := KS(tc.a, tc.b)
			if math.Abs(d-tc.want) > 1e-12 {
				t.Fatalf("D: want %v, got %v", tc.want, d)
			}
			if p < tc.wantPAbove || p < 0 || p > 1 {
				t.Fatalf("p-value %v out of range (want ≥ %v)", p, tc.wantPAbove)
			}
		})
	}
}

// The Kolmogorov distribution's upper tail at textbook points (Smirnov
// 1948 tables; 1.358 is the 5% critical value, 1.628 the 1%).
func TestQKS(t *testing.T) {
	tests := []struct{ z, want float64 }{
		{0.5, 0.9639},
		{1.0, 0.2700},
		{1.358, 0.0500},
		{1.628, 0.0100},
		{2.0, 0.00067},
	}
	for _, tc := range tests {
		if got := qKS(tc.z); math.Abs(got-tc.want) > 5e-4 {
			t.Errorf("Q_KS(%v): want %v, got %v", tc.z, tc.want, got)
		}
	}
	if lo, hi := qKS(1.1799999), qKS(1.1800001); math.Abs(lo-hi) > 1e-6 {
		t.Errorf("discontinuous at the switch of series: %v vs %v", lo, hi)
	}
}

func TestKSPValueCalibrated(t *testing.T) {
	// Under the null, the share of p-values at or below 0.05 is about
	// 0.05 (a little less: the asymptotic test is conservative).
	rng := rand.New(rand.NewPCG(1, 1))
	const trials = 400
	rejected := 0
	a, b := make([]float64, 300), make([]float64, 200)
	for range trials {
		for i := range a {
			a[i] = rng.NormFloat64()
		}
		for i := range b {
			b[i] = rng.NormFloat64()
		}
		slices.Sort(a)
		slices.Sort(b)
		if _, p := KS(a, b); p <= 0.05 {
			rejected++
		}
	}
	if rate := float64(rejected) / trials; rate > 0.09 || rate < 0.01 {
		t.Fatalf("rejection rate at 5%% under the null: %.3f", rate)
	}
}

func TestWasserstein1(t *testing.T) {
	tests := []struct {
		name  string
		a, b  []float64
		scale float64
		want  float64
	}{
		{name: "shift", a: []float64{0, 1}, b: []float64{2, 3}, want: 2},
		{name: "point", a: []float64{0}, b: []float64{0.5}, want: 0.5},
		{name: "scaled", a: []float64{0}, b: []float64{0.5}, scale: 0.25, want: 2},
		{name: "same", a: []float64{1, 2, 3}, b: []float64{1, 2, 3}, want: 0},
		// Moving one of three unit masses from 0 to 3 costs 1/3 · 3.
		{name: "one-mass", a: []float64{0, 1, 2}, b: []float64{1, 2, 3}, want: 1},
		{name: "uneven", a: []float64{0, 0, 0, 4}, b: []float64{0, 4}, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Wasserstein1(tc.a, tc.b, tc.scale); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("want %v, got %v", tc.want, got)
			}
		})
	}
}

func TestPSI(t *testing.T) {
	ref := FeatureReference{Edges: []float64{0}, Proportions: []float64{0.5, 0.5}}
	// Live (0.75, 0.25): 0.25·ln(1.5) + (−0.25)·ln(0.5).
	want := 0.25*math.Log(1.5) - 0.25*math.Log(0.5)
	live := []float64{-1, -2, 0, 3} // 0 falls in the first bin (v ≤ edge)
	if got := PSI(ref, live); math.Abs(got-want) > 1e-12 {
		t.Fatalf("PSI: want %v, got %v", want, got)
	}
	slices.Sort(live)
	if got := psiSorted(ref, live); math.Abs(got-want) > 1e-12 {
		t.Fatalf("psiSorted: want %v, got %v", want, got)
	}
	if got := PSI(ref, []float64{-1, 1}); got != 0 {
		t.Fatalf("matching proportions: want 0, got %v", got)
	}
	// An empty bin is floored, so the score is finite.
	if got := PSI(ref, []float64{-1, -1}); math.IsInf(got, 0) || got < 1 {
		t.Fatalf("all in one bin: want a large finite PSI, got %v", got)
	}
}

func TestAdjust(t *testing.T) {
	ps := []float64{0.01, 0.04, 0.03, 0.2}
	tests := []struct {
		c    Correction
		want []float64
	}{
		{Bonferroni, []float64{0.04, 0.16, 0.12, 0.8}},
		// Sorted 0.01, 0.03, 0.04, 0.2 → m·p/j = 0.04, 0.06, 0.0533, 0.2,
		// then the running minimum from the largest.
		{BenjaminiHochberg, []float64{0.04, 0.16 / 3, 0.16 / 3, 0.2}},
		{NoCorrection, ps},
	}
	for _, tc := range tests {
		t.Run(string(tc.c), func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Adjust(tc.c, ps), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // 100..1, unsorted
	}
	r, err := Summarize("x", append(v, math.NaN()), SummaryOptions{SampleSize: 20, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Type-7 quantile at k/10 of 1..100 is 1 + 99k/10.
	want := []float64{10.9, 20.8, 30.7, 40.6, 50.5, 60.4, 70.3, 80.2, 90.1}
	if diff := cmp.Diff(want, r.Edges, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Fatalf("edges (-want +got):\n%s", diff)
	}
	for i, p := range r.Proportions {
		if math.Abs(p-0.1) > 1e-12 {
			t.Fatalf("bin %d proportion %v, want 0.1", i, p)
		}
	}
	if r.Count != 100 || r.Mean != 50.5 || r.Min != 1 || r.Max != 100 || len(r.Sample) != 20 || !slices.IsSorted(r.Sample) {
		t.Fatalf("summary %+v", r)
	}
	if math.Abs(r.Std-math.Sqrt((100*100-1)/12.0)) > 1e-9 {
		t.Fatalf("std %v", r.Std)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := Summarize("c", []float64{2, 2, 2}, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Edges) != 0 || len(c.Proportions) != 1 || c.Std != 0 {
		t.Fatalf("constant feature: %+v", c)
	}
	if _, err := Summarize("nan", []float64{math.NaN()}, SummaryOptions{}); err == nil {
		t.Fatal("want an error for no finite values")
	}
}

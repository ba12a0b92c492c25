package drift

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// FeatureReference summarises one feature's (or the prediction's) reference
// distribution, normally the training data. It is what a model version
// carries (as JSON) so that any agent serving the version can judge drift
// without the training set.
type FeatureReference struct {
	// Name is the feature's column name.
	Name string `json:"name"`
	// Count is the number of values summarised.
	Count int `json:"count"`
	// Mean and Std are the sample mean and (population) standard deviation.
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	// Min and Max bound the values seen.
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	// Edges are the interior bin edges, ascending and distinct, at the
	// reference quantiles 1/B, …, (B-1)/B; bin i holds values v with
	// Edges[i-1] < v <= Edges[i] (the first bin is open below, the last
	// open above). Ties can merge quantiles, so there may be fewer than
	// B-1 edges.
	Edges []float64 `json:"edges"`
	// Proportions are the reference's share of values in each bin
	// (len(Edges)+1 entries, summing to 1).
	Proportions []float64 `json:"proportions"`
	// Sample is a sorted, seeded uniform sample of at most SampleSize
	// values, used by the KS and Wasserstein detectors.
	Sample []float64 `json:"sample"`
}

// Reference is the reference summary of a model version's inputs and,
// optionally, of its prediction (score) distribution.
type Reference struct {
	// Features are in the model's input column order.
	Features []FeatureReference `json:"features"`
	// Prediction summarises the model's score on the reference data; nil
	// when unknown.
	Prediction *FeatureReference `json:"prediction,omitempty"`
}

// SummaryOptions control Summarize. The zero value means the defaults.
type SummaryOptions struct {
	// Bins is the number of quantile bins for PSI. Default 10.
	Bins int
	// SampleSize bounds the kept sample. Default 512: the KS statistic's
	// resolution against a sample of m values is about 1/m, and the live
	// windows it is compared with are of similar size.
	SampleSize int
	// Seed draws the sample. Default 0 (still deterministic).
	Seed uint64
}

// Summary defaults.
const (
	DefaultBins       = 10
	DefaultSampleSize = 512
)

// EnsureDefaults fills zero fields with their defaults.
func (o *SummaryOptions) EnsureDefaults() {
	if o.Bins == 0 {
		o.Bins = DefaultBins
	}
	if o.SampleSize == 0 {
		o.SampleSize = DefaultSampleSize
	}
}

// ErrInvalid is returned, wrapped, for invalid options, references and
// inputs.
var ErrInvalid = errors.New("drift: invalid")

// Summarize builds the reference summary of values. NaNs are dropped. It
// returns an error wrapping ErrInvalid when no finite value remains or the
// options are out of range.
func Summarize(name string, values []float64, opts SummaryOptions) (FeatureReference, error) {
	opts.EnsureDefaults()
	if opts.Bins < 2 || opts.SampleSize < 2 {
		return FeatureReference{}, fmt.Errorf("%w: summary needs Bins >= 2 and SampleSize >= 2, got %d and %d", ErrInvalid, opts.Bins, opts.SampleSize)
	}
	sorted := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			sorted = append(sorted, v)
		}
	}
	if len(sorted) == 0 {
		return FeatureReference{}, fmt.Errorf("%w: feature %q has no values", ErrInvalid, name)
	}
	slices.Sort(sorted)
	n := float64(len(sorted))
	var mean, m2 float64
	for i, v := range sorted { // Welford
		d := v - mean
		mean += d / float64(i+1)
		m2 += d * (v - mean)
	}
	r := FeatureReference{
		Name: name, Count: len(sorted), Mean: mean, Std: math.Sqrt(m2 / n),
		Min: sorted[0], Max: sorted[len(sorted)-1],
	}
	for k := 1; k < opts.Bins; k++ {
		e := quantileSorted(sorted, float64(k)/float64(opts.Bins))
		if e >= r.Max {
			break // an edge at the maximum would leave an empty last bin
		}
		if len(r.Edges) == 0 || e > r.Edges[len(r.Edges)-1] {
			r.Edges = append(r.Edges, e)
		}
	}
	counts := make([]float64, len(r.Edges)+1)
	for _, v := range sorted {
		counts[binOf(r.Edges, v)]++
	}
	r.Proportions = make([]float64, len(counts))
	for i, c := range counts {
		r.Proportions[i] = c / n
	}
	if len(sorted) <= opts.SampleSize {
		r.Sample = sorted
	} else {
		// A uniform sample without replacement (partial Fisher–Yates over
		// indices), sorted again for the detectors.
		rng := rand.New(rand.NewPCG(opts.Seed, uint64(len(sorted))))
		idx := make([]int, len(sorted))
		for i := range idx {
			idx[i] = i
		}
		r.Sample = make([]float64, opts.SampleSize)
		for i := 0; i < opts.SampleSize; i++ {
			j := i + rng.IntN(len(idx)-i)
			idx[i], idx[j] = idx[j], idx[i]
			r.Sample[i] = sorted[idx[i]]
		}
		slices.Sort(r.Sample)
	}
	return r, nil
}

// SummarizeColumns summarises every column of a row-major matrix x with
// len(names) columns.
func SummarizeColumns(names []string, x []float64, opts SummaryOptions) (Reference, error) {
	f := len(names)
	if f == 0 || len(x)%f != 0 {
		return Reference{}, fmt.Errorf("%w: %d values do not form rows of %d columns", ErrInvalid, len(x), f)
	}
	rows := len(x) / f
	col := make([]float64, rows)
	ref := Reference{Features: make([]FeatureReference, f)}
	for j, name := range names {
		for i := 0; i < rows; i++ {
			col[i] = x[i*f+j]
		}
		fr, err := Summarize(name, col, opts)
		if err != nil {
			return Reference{}, err
		}
		ref.Features[j] = fr
	}
	return ref, nil
}

// Validate checks a reference read from elsewhere: ascending edges, one
// proportion per bin, a non-empty sorted sample, a non-negative std.
func (r FeatureReference) Validate() error {
	var errs []error
	if !slices.IsSorted(r.Edges) {
		errs = append(errs, fmt.Errorf("feature %q: edges not ascending", r.Name))
	}
	if len(r.Proportions) != len(r.Edges)+1 {
		errs = append(errs, fmt.Errorf("feature %q: %d proportions for %d bins", r.Name, len(r.Proportions), len(r.Edges)+1))
	}
	if len(r.Sample) == 0 || !slices.IsSorted(r.Sample) {
		errs = append(errs, fmt.Errorf("feature %q: sample must be non-empty and sorted", r.Name))
	}
	if !(r.Std >= 0) {
		errs = append(errs, fmt.Errorf("feature %q: std %v", r.Name, r.Std))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// quantileSorted is the type-7 (linear interpolation) sample quantile of
// Hyndman & Fan (1996), "Sample quantiles in statistical packages".
func quantileSorted(s []float64, q float64) float64 {
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// binOf returns the bin of v: the number of edges strictly below v.
func binOf(edges []float64, v float64) int {
	lo, hi := 0, len(edges)
	for lo < hi {
		m := (lo + hi) / 2
		if edges[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

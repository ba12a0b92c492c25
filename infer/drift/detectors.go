package drift

import (
	"math"
)

// Detector names a drift statistic.
type Detector string

// Detectors.
const (
	// DetectorPSI is the population stability index over the
	// reference's quantile bins (see PSI).
	DetectorPSI Detector = "psi"
	// DetectorKS is the two-sample Kolmogorov–Smirnov test (see KS).
	DetectorKS Detector = "ks"
	// DetectorWasserstein is the Wasserstein-1 distance in reference
	// standard deviations (see Wasserstein1).
	DetectorWasserstein Detector = "wasserstein"
)

// Detectors lists every detector, in a stable order.
var Detectors = []Detector{DetectorPSI, DetectorKS, DetectorWasserstein}

// psiFloor is the proportion an empty bin is given so that the logarithm
// stays finite; 1e-4 is the usual choice in credit-scoring practice.
const psiFloor = 1e-4

// PSI is the population stability index of live against ref:
//
//	PSI = Σ_i (a_i − e_i) · ln(a_i / e_i)
//
// where e_i is the reference's proportion in bin i (ref.Proportions, bins
// from ref.Edges at reference quantiles) and a_i the live proportion,
// each floored at 1e-4. It is the symmetrised Kullback–Leibler divergence
// of the binned distributions (Siddiqi 2006, "Credit Risk Scorecards",
// ch. 8; Yurdakul 2018, "Statistical Properties of Population Stability
// Index"). Rule of thumb: below 0.1 stable, 0.1–0.25 moderate shift, above
// 0.25 significant. live need not be sorted; it returns 0 for an empty
// live slice.
func PSI(ref FeatureReference, live []float64) float64 {
	if len(live) == 0 {
		return 0
	}
	var stack [32]float64
	var counts []float64
	if len(ref.Proportions) <= len(stack) {
		counts = stack[:len(ref.Proportions)]
	} else {
		counts = make([]float64, len(ref.Proportions))
	}
	for _, v := range live {
		counts[binOf(ref.Edges, v)]++
	}
	return psiFromCounts(ref.Proportions, counts, float64(len(live)))
}

// psiSorted is PSI for a sorted live window: one merge instead of a binary
// search per value.
func psiSorted(ref FeatureReference, live []float64) float64 {
	if len(live) == 0 {
		return 0
	}
	var stack [32]float64
	var counts []float64
	if len(ref.Proportions) <= len(stack) {
		counts = stack[:len(ref.Proportions)]
	} else {
		counts = make([]float64, len(ref.Proportions))
	}
	b := 0
	for _, v := range live {
		for b < len(ref.Edges) && ref.Edges[b] < v {
			b++
		}
		counts[b]++
	}
	return psiFromCounts(ref.Proportions, counts, float64(len(live)))
}

func psiFromCounts(expected, counts []float64, n float64) float64 {
	var psi float64
	for i, c := range counts {
		a := math.Max(c/n, psiFloor)
		e := math.Max(expected[i], psiFloor)
		psi += (a - e) * math.Log(a/e)
	}
	return psi
}

// KS returns the two-sample Kolmogorov–Smirnov statistic
// D = sup_x |F_ref(x) − F_live(x)| of two sorted samples and its
// asymptotic p-value (see KSPValue). Ties are handled exactly: both
// empirical CDFs step past a shared value together. It returns (0, 1) when
// either sample is empty.
func KS(refSorted, liveSorted []float64) (d, p float64) {
	n, m := len(refSorted), len(liveSorted)
	if n == 0 || m == 0 {
		return 0, 1
	}
	// Work in integers: the CDF gap at any point is |i·m − j·n| / (n·m).
	i, j := 0, 0
	var best int64
	in, im := int64(n), int64(m)
	for i < n && j < m {
		x := refSorted[i]
		if liveSorted[j] < x {
			x = liveSorted[j]
		}
		for i < n && refSorted[i] == x {
			i++
		}
		for j < m && liveSorted[j] == x {
			j++
		}
		gap := int64(i)*im - int64(j)*in
		if gap < 0 {
			gap = -gap
		}
		if gap > best {
			best = gap
		}
	}
	d = float64(best) / (float64(n) * float64(m))
	// Once one sample is exhausted its CDF is 1 and the other's only
	// climbs towards 1, so the gap only shrinks: the sup has been seen.
	return d, KSPValue(d, n, m)
}

// KSPValue is the asymptotic p-value of a two-sample KS statistic d for
// samples of n and m values: Q_KS(λ) with λ = (√nₑ + 0.12 + 0.11/√nₑ)·d and
// nₑ = nm/(n+m), where
//
//	Q_KS(λ) = 2 Σ_{j≥1} (−1)^{j−1} e^{−2j²λ²}
//
// (Kolmogorov 1933; Smirnov 1948; the small-sample correction of λ is
// Stephens 1970, as in Press et al., "Numerical Recipes", 3rd ed.,
// §14.3.3). Below λ = 1.18 the series converges slowly and the equivalent
// form 1 − (√(2π)/λ) Σ_{j≥1} e^{−(2j−1)²π²/(8λ²)} is used instead.
func KSPValue(d float64, n, m int) float64 {
	if n <= 0 || m <= 0 || d <= 0 {
		return 1
	}
	ne := float64(n) * float64(m) / float64(n+m)
	s := math.Sqrt(ne)
	return qKS((s + 0.12 + 0.11/s) * d)
}

func qKS(z float64) float64 {
	if z <= 0 {
		return 1
	}
	if z < 1.18 {
		y := math.Exp(-math.Pi * math.Pi / (8 * z * z))
		p := math.Sqrt(2*math.Pi) / z * (y + math.Pow(y, 9) + math.Pow(y, 25) + math.Pow(y, 49))
		return math.Min(1, math.Max(0, 1-p))
	}
	x := math.Exp(-2 * z * z)
	return math.Max(0, 2*(x-math.Pow(x, 4)+math.Pow(x, 9)))
}

// Wasserstein1 is the Wasserstein-1 (earth mover's) distance between the
// empirical distributions of two sorted samples, ∫ |F_ref(x) − F_live(x)| dx
// (Villani 2009, "Optimal Transport", Remark 6.6; in one dimension it is the
// L1 distance between CDFs, Vallender 1974), divided by scale. Pass the
// reference's standard deviation as scale to get a unit-free distance: a
// shift of the mean by k standard deviations scores k. A scale ≤ 0 means 1.
// It returns 0 when either sample is empty.
func Wasserstein1(refSorted, liveSorted []float64, scale float64) float64 {
	n, m := len(refSorted), len(liveSorted)
	if n == 0 || m == 0 {
		return 0
	}
	if !(scale > 0) {
		scale = 1
	}
	// The CDF gap between consecutive points is |i·m − j·n| / (n·m);
	// accumulate the numerator and divide once.
	in, im := int64(n), int64(m)
	i, j := 0, 0
	prev := refSorted[0]
	if liveSorted[0] < prev {
		prev = liveSorted[0]
	}
	var w float64
	for i < n || j < m {
		var x float64
		if j >= m || (i < n && refSorted[i] <= liveSorted[j]) {
			x = refSorted[i]
		} else {
			x = liveSorted[j]
		}
		gap := int64(i)*im - int64(j)*in
		if gap < 0 {
			gap = -gap
		}
		w += float64(gap) * (x - prev)
		prev = x
		for i < n && refSorted[i] == x {
			i++
		}
		for j < m && liveSorted[j] == x {
			j++
		}
	}
	w /= float64(n) * float64(m)
	return w / scale
}

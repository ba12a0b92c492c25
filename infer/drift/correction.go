package drift

import (
	"math"
	"slices"
)

// Correction names a multiple-testing correction applied to the KS
// p-values of all watched features (and the prediction) in one evaluation,
// so that watching many features does not multiply false alarms.
type Correction string

// Corrections.
const (
	// BenjaminiHochberg controls the false discovery rate: the expected
	// share of flagged features that did not drift is at most the alarm
	// level (Benjamini & Hochberg 1995, "Controlling the False Discovery
	// Rate", JRSS B 57(1)). Less conservative than Bonferroni when
	// several features drift together. The default.
	BenjaminiHochberg Correction = "bh"
	// Bonferroni controls the family-wise error rate: the chance that any
	// undrifted feature is flagged is at most the alarm level (p·m).
	Bonferroni Correction = "bonferroni"
	// NoCorrection compares raw p-values with the alarm level.
	NoCorrection Correction = "none"
)

// Adjust returns adjusted p-values for ps under c (same order as ps),
// each in [0, 1]; a feature is significant at level α when its adjusted
// p-value is at most α. Bonferroni multiplies by m; Benjamini–Hochberg
// uses the step-up adjustment p̃_(i) = min_{j≥i} m·p_(j)/j over the sorted
// p-values.
func Adjust(c Correction, ps []float64) []float64 {
	out := make([]float64, len(ps))
	adjustInto(c, ps, out, make([]int, len(ps)))
	return out
}

// adjustInto is Adjust writing into out, with idx as scratch (both
// len(ps)), so the monitor's evaluations do not allocate.
func adjustInto(c Correction, ps, out []float64, idx []int) {
	m := float64(len(ps))
	switch c {
	case Bonferroni:
		for i, p := range ps {
			out[i] = math.Min(1, p*m)
		}
	case BenjaminiHochberg, "":
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int {
			switch {
			case ps[a] < ps[b]:
				return -1
			case ps[a] > ps[b]:
				return 1
			}
			return a - b
		})
		run := 1.0
		for k := len(idx) - 1; k >= 0; k-- {
			run = math.Min(run, ps[idx[k]]*m/float64(k+1))
			out[idx[k]] = run
		}
	default:
		copy(out, ps)
	}
}

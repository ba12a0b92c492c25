package drift

import (
	"errors"
	"fmt"
	"math"
)

// Scale names how the streaming detector standardizes a raw value before
// accumulating it.
type Scale string

// Scales.
const (
	// ScaleRank maps a value to its normal score against the reference
	// sample: z = Φ⁻¹((r + ½)/(n + 1)), where r is the number of the n
	// sample values below it (ties count half). Under no drift a live value
	// is equally likely to fall in each of the n + 1 gaps between sample
	// values whatever the feature's (continuous) distribution, so z is
	// N(0, 1) up to the reference's sampling error and the threshold's
	// false-alarm rate holds for skewed and heavy-tailed features too.
	// z is bounded by ±Φ⁻¹(1 − ½/(n+1)) (±3.1 for n = 512), so one
	// outlier cannot raise an alarm alone. Discrete features get fewer
	// false alarms than configured (their scores vary less). The default.
	ScaleRank Scale = "rank"
	// ScaleMoments standardizes by the reference mean and standard
	// deviation, z = (x − μ)/σ, clipped to ±10. The threshold assumes z is
	// N(0, 1): right for Gaussian features, while a skewed or heavy-tailed
	// feature raises false alarms far more often than configured.
	ScaleMoments Scale = "moments"
)

// StreamConfig tunes the streaming detector: a two-sided CUSUM per feature
// (see CUSUM), updated on every row. The zero value means the documented
// defaults.
type StreamConfig struct {
	// ARL is the in-control average run length the policy asks for: the
	// expected number of rows between false alarms for the whole model,
	// all watched features (and the prediction) together. Default
	// DefaultStreamARL. With F columns and s sides per column (3, or 2
	// with the spread side off) each one-sided detector gets an ARL of
	// s·F·ARL (the false-alarm rates of the s·F detectors add up, a
	// union bound), and its threshold follows: by Siegmund's
	// approximation for the mean sides (see CUSUMThreshold, with the
	// allowance lowered by 2/√n for the sampling error of a reference of
	// n values), by Lorden's bound e^h for the spread side. Both err on
	// the safe side: with the rank scale, on Gaussian and log-normal
	// streams against 20 references (512-value samples), the measured
	// rate is a fifth to a half of 1/ARL. A tenfold ARL raises a mean side's threshold by about
	// ln(10)/(2k) and the delay to a shift of δ by about ln(10)/(2k(δ−k))
	// rows: 2.3 rows at δ = 1, k = ½.
	ARL float64 `json:"arl,omitempty"`
	// Shift is the mean shift, in reference standard deviations, that the
	// detector is tuned to catch fastest; the CUSUM's reference value
	// (allowance) is k = Shift/2, optimal for that shift (Page 1954,
	// Lorden 1971). Default 1. Larger shifts are still caught, smaller
	// ones later.
	Shift float64 `json:"shift,omitempty"`
	// Scale says how a value is standardized. Default ScaleRank.
	Scale Scale `json:"scale,omitempty"`
	// Spread is the variance ratio v the third, spread side is tuned for
	// (see CUSUM): a rise in the standardized values' variance, such as a
	// minority of rows from another class mixed in, that moves the mean
	// too little for the mean sides. Default 2; 1 turns the spread side
	// off.
	Spread float64 `json:"spread,omitempty"`
}

// Stream defaults.
const (
	// DefaultStreamARL is one false alarm per million rows per model on
	// average, 1% of the one-per-10,000 budget: a tenfold ARL costs a
	// few rows of delay, and a false alarm costs a retrain.
	DefaultStreamARL = 1e6
	// DefaultStreamShift is the design shift, one standard deviation.
	DefaultStreamShift = 1.0
	// DefaultStreamSpread is the design variance ratio of the spread side.
	DefaultStreamSpread = 2.0
)

// EnsureDefaults fills zero fields with their documented defaults.
func (c *StreamConfig) EnsureDefaults() {
	if c.ARL == 0 {
		c.ARL = DefaultStreamARL
	}
	if c.Shift == 0 {
		c.Shift = DefaultStreamShift
	}
	if c.Scale == "" {
		c.Scale = ScaleRank
	}
	if c.Spread == 0 {
		c.Spread = DefaultStreamSpread
	}
}

// Validate reports every problem with c (after EnsureDefaults) joined into
// one error wrapping ErrInvalid.
func (c StreamConfig) Validate() error {
	var errs []error
	if !(c.ARL >= 10) || math.IsInf(c.ARL, 0) {
		errs = append(errs, fmt.Errorf("stream arl %v: want at least 10 rows between false alarms", c.ARL))
	}
	if !(c.Shift > 0 && c.Shift <= 10) {
		errs = append(errs, fmt.Errorf("stream shift %v: want a shift in (0, 10] standard deviations", c.Shift))
	}
	if !(c.Spread >= 1 && c.Spread <= 100) {
		errs = append(errs, fmt.Errorf("stream spread %v: want a variance ratio in [1, 100] (1 turns the spread side off)", c.Spread))
	}
	switch c.Scale {
	case ScaleRank, ScaleMoments:
	default:
		errs = append(errs, fmt.Errorf("stream scale %q: want rank or moments", c.Scale))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// momentsClip bounds a moments-standardized value, so that a zero
// reference standard deviation or one wild value cannot make a statistic
// infinite.
const momentsClip = 10

// CUSUM is Page's cumulative sum detector (Page 1954, "Continuous
// Inspection Schemes", Biometrika 41(1/2)) run two-sided on one feature
// standardized against its reference (see Scale):
//
//	S⁺ₙ = max(0, S⁺ₙ₋₁ + zₙ − k)    S⁻ₙ = max(0, S⁻ₙ₋₁ − zₙ − k)
//
// It alarms when either exceeds the threshold h and then restarts that side
// from 0, so alarms under no drift form a renewal process whose mean gap is
// the configured run length.
//
// A side that alarmed is also held: a copy of its statistic that does not
// restart, starts at its threshold (capped at twice it, see holdCap),
// follows the same recursion until it falls back to 0; the feature's other
// sides are held from their statistics at the alarm. Under no drift that
// takes about h/k rows for a mean side and h/(½ ln v − ½(1 − 1/v)) for the
// spread side from the threshold (tens and a couple of hundred rows at the
// defaults), twice that from the cap; while the drift lasts the held
// statistic stays high. Holding says whether any side is
// still held: a streaming alarm clears only when none is (see Config.Stream).
//
// A third, spread side (unless StreamConfig.Spread is 1) is the CUSUM of
// the log-likelihood ratio of N(0, v) against N(0, 1) (Page 1954; Lorden
// 1971, "Procedures for Reacting to a Change in Distribution", Ann. Math.
// Statist. 42(6)):
//
//	Gₙ = max(0, Gₙ₋₁ − ½ ln v + ½ zₙ² (1 − 1/v))
//
// It sees a rise in variance, or a minority of rows far from the rest,
// that leaves the mean nearly where it was. For a likelihood-ratio CUSUM
// the in-control run length is at least e^h (Lorden 1971), so its
// threshold is h = ln ARL: a bound for N(0, 1) values, conservative in
// practice (Tartakovsky, Nikiforov & Basseville 2014, "Sequential
// Analysis", Lemma 8.2.1).
//
// Each row costs O(1) for ScaleMoments and O(log n) (a binary search of the
// n-value reference sample and a table look-up) for ScaleRank. Against an
// abrupt mean shift of δ > k the expected delay is about
// (h + 1.166)/(δ − k) rows (see CUSUMARL). A CUSUM is not safe for
// concurrent use.
type CUSUM struct {
	k, h      float64
	scale     Scale
	mean, std float64
	sample    []float64 // sorted reference sample (rank)
	score     []float64 // normal score of each of the len(sample)+1 gaps
	upper     float64
	lower     float64
	alarms    int64
	lastAlarm int64
	side      Side
	seen      int64
	// crossed is the statistic over its threshold of the side that
	// raised the latest alarm, as it crossed (before the restart).
	crossed float64
	// hold is each side's held statistic (up, down, spread); 0 when the
	// side is not held.
	hold [3]float64

	spread float64 // G
	hs     float64 // the spread side's threshold; 0: off
	sa, sb float64 // its increment is sa + sb·z²
}

// NewCUSUM returns a CUSUM (two mean sides and, unless cfg.Spread is 1, a
// spread side) for one feature of a model that watches features columns in
// all, with its threshold set from cfg (see
// StreamConfig.ARL). Errors wrap ErrInvalid.
func NewCUSUM(ref FeatureReference, cfg StreamConfig, features int) (*CUSUM, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if features < 1 {
		return nil, fmt.Errorf("%w: %d features", ErrInvalid, features)
	}
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	c := &CUSUM{k: cfg.Shift / 2, scale: cfg.Scale, mean: ref.Mean, std: ref.Std}
	sides := 2.0
	if cfg.Spread > 1 {
		sides = 3
		c.sa, c.sb = -math.Log(cfg.Spread)/2, (1-1/cfg.Spread)/2
	}
	n := max(ref.Count, 1)
	if cfg.Scale == ScaleRank {
		c.sample = ref.Sample
		c.score = normalScores(len(ref.Sample))
		n = len(ref.Sample) + 1
	}
	arl := sides * float64(features) * cfg.ARL
	c.h = CUSUMThreshold(arl, c.k-estimationMargin(c.k, n))
	if sides == 3 {
		c.hs = math.Log(arl)
	}
	return c, nil
}

// estimationMargin is how far the standardized live mean may sit from 0
// under no drift because the reference is itself a sample of n values: its
// standard error is about 1/√n for either scale (for ScaleRank, the
// variance of Σ gᵢzᵢ over the Dirichlet gap masses gᵢ is Σzᵢ²/((n+1)(n+2))
// ≈ 1/n). The threshold is computed for an allowance k − 2/√n, so that
// the configured run length holds for about 97.7% of references on each
// side; capped at k/2.
func estimationMargin(k float64, n int) float64 {
	return math.Min(k/2, 2/math.Sqrt(float64(n)))
}

// normalScores returns Φ⁻¹((i + ½)/(n + 1)) for i = 0…n.
func normalScores(n int) []float64 {
	s := make([]float64, n+1)
	for i := range s {
		s[i] = normalQuantile((float64(i) + 0.5) / float64(n+1))
	}
	return s
}

// normalQuantile is Φ⁻¹(p), the standard normal quantile.
func normalQuantile(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }

// Standardize returns the value the CUSUM accumulates for x: its normal
// score against the reference sample (ScaleRank) or (x − μ)/σ clipped to
// ±10 (ScaleMoments).
func (c *CUSUM) Standardize(x float64) float64 {
	if c.scale == ScaleMoments {
		d := x - c.mean
		if c.std > 0 {
			d /= c.std
		} else if d != 0 {
			d = math.Copysign(math.Inf(1), d)
		}
		return math.Max(-momentsClip, math.Min(momentsClip, d))
	}
	lo := lowerBound(c.sample, x)
	if lo == len(c.sample) || c.sample[lo] != x {
		return c.score[lo]
	}
	// Ties count half: the mid-rank's score. A binary search for the end
	// of the run of ties keeps a discrete feature at O(log n) too.
	hi := lo + 1
	for n := len(c.sample) - hi; n > 0; {
		half := n / 2
		if c.sample[hi+half] == x {
			hi, n = hi+half+1, n-half-1
		} else {
			n = half
		}
	}
	mid := float64(lo+hi) / 2
	return normalQuantile((mid + 0.5) / float64(len(c.sample)+1))
}

// Observe adds one value and reports whether it raised an alarm (on
// either side); the side that alarmed restarts from 0 and is held (see
// Holding).
func (c *CUSUM) Observe(x float64) bool {
	z := c.Standardize(x)
	c.seen++
	c.upper = math.Max(0, c.upper+z-c.k)
	c.lower = math.Max(0, c.lower-z-c.k)
	c.holdStep(0, z-c.k, c.h)
	c.holdStep(1, -z-c.k, c.h)
	alarm, crossed := false, 0.0
	if c.upper > c.h {
		crossed = c.upper / c.h
		c.upper, c.side, alarm, c.hold[0] = 0, SideUp, true, c.h
	}
	if c.lower > c.h {
		crossed = math.Max(crossed, c.lower/c.h)
		c.lower, c.side, alarm, c.hold[1] = 0, SideDown, true, c.h
	}
	if c.hs > 0 {
		inc := c.sa + c.sb*z*z
		c.spread = math.Max(0, c.spread+inc)
		c.holdStep(2, inc, c.hs)
		if c.spread > c.hs {
			// A mean side that crossed on this row too names the alarm.
			if !alarm {
				crossed = c.spread / c.hs
				if c.side = SideSpread; c.upper > c.h/2 || c.lower > c.h/2 {
					// Well on the way on a mean side too: say which.
					c.side = SideUp
					if c.lower > c.upper {
						c.side = SideDown
					}
				}
			}
			c.spread, alarm, c.hold[2] = 0, true, c.hs
		}
	}
	if alarm {
		c.alarms++
		c.lastAlarm = c.seen
		c.crossed = crossed
		// The sides that did not cross are held from where they are: a
		// mixture can raise the mean side first while the spread side,
		// on its way up, is the one that sees it lasting.
		for i, v := range [3]float64{c.upper, c.lower, c.spread} {
			c.hold[i] = math.Max(c.hold[i], v)
		}
	}
	return alarm
}

// holdStep moves side i's held statistic by inc, within [0, h]; a side
// not held stays so.
func (c *CUSUM) holdStep(i int, inc, h float64) {
	if c.hold[i] > 0 {
		c.hold[i] = math.Min(holdCap*h, math.Max(0, c.hold[i]+inc))
	}
}

// Holding says whether a side that alarmed is still held: its statistic,
// without the restart, has not yet fallen back to 0.
func (c *CUSUM) Holding() bool { return c.hold != [3]float64{} }

// Crossed is the statistic over its threshold of the side that raised the
// latest alarm, as it crossed (above 1; 0 before any alarm). The side
// itself restarted from 0 at that row, so Statistics no longer shows it.
func (c *CUSUM) Crossed() float64 { return c.crossed }

// Threshold is h, in standardized units.
func (c *CUSUM) Threshold() float64 { return c.h }

// SpreadThreshold is the spread side's threshold, ln ARL (0 when off).
func (c *CUSUM) SpreadThreshold() float64 { return c.hs }

// Spread returns the spread side's statistic G.
func (c *CUSUM) Spread() float64 { return c.spread }

// Allowance is k, the reference value subtracted from every standardized
// value (half the design shift).
func (c *CUSUM) Allowance() float64 { return c.k }

// Statistics returns S⁺ and S⁻.
func (c *CUSUM) Statistics() (upper, lower float64) { return c.upper, c.lower }

// Alarms returns the number of alarms raised and the number of values
// observed when the latest fired (0 if none).
func (c *CUSUM) Alarms() (n, last int64) { return c.alarms, c.lastAlarm }

// StreamScore is one feature's streaming detector state.
type StreamScore struct {
	// Name is the feature's name ("prediction" for the score).
	Name string `json:"name"`
	// Upper and Lower are the CUSUM statistics S⁺ and S⁻ (upward and
	// downward shifts), in standardized units; an alarm fires when one
	// exceeds Threshold.
	Upper float64 `json:"upper"`
	Lower float64 `json:"lower"`
	// Threshold is h.
	Threshold float64 `json:"threshold"`
	// Spread is the spread side's statistic (a log-likelihood ratio) and
	// SpreadThreshold its threshold; both 0 when the side is off.
	Spread          float64 `json:"spread,omitempty"`
	SpreadThreshold float64 `json:"spread_threshold,omitempty"`
	// Alarms counts the feature's streaming alarms so far.
	Alarms int64 `json:"alarms,omitempty"`
	// LastAlarm is the Monitor's Seen count at the latest alarm, 0 if none.
	LastAlarm int64 `json:"last_alarm,omitempty"`
	// Side says which side raised the latest alarm; "" before any.
	Side Side `json:"side,omitempty"`
	// AlarmStatistic is the statistic that raised the latest alarm over
	// its threshold, as it crossed (above 1; 0 before any alarm): the
	// side restarts from 0 at once, so Upper, Lower and Spread no longer
	// show it.
	AlarmStatistic float64 `json:"alarm_statistic,omitempty"`
	// Holding says a side that alarmed is still held (see CUSUM): its
	// evidence has not decayed back to 0, so a streaming alarm holds.
	Holding bool `json:"holding,omitempty"`
	// Drifted says the feature alarmed since the Monitor's last windowed
	// evaluation (or since it started, before the first).
	Drifted bool `json:"drifted"`
}

// Side names the side of a CUSUM that alarmed.
type Side string

// Sides.
const (
	// SideUp is an upward shift of the mean.
	SideUp Side = "up"
	// SideDown is a downward shift of the mean.
	SideDown Side = "down"
	// SideSpread is a rise in spread alone (the spread side alarmed while
	// neither mean side was past half its threshold).
	SideSpread Side = "spread"
)

// StreamState is a CUSUM's serialisable state, for Monitor.State.
type StreamState struct {
	Upper     float64 `json:"upper"`
	Lower     float64 `json:"lower"`
	Alarms    int64   `json:"alarms,omitempty"`
	LastAlarm int64   `json:"last_alarm,omitempty"`
	Spread    float64 `json:"spread,omitempty"`
	Side      Side    `json:"side,omitempty"`
	Drifted   bool    `json:"drifted,omitempty"`
	// Crossed is the latest alarm's statistic over its threshold (see
	// CUSUM.Crossed); Hold the held statistics of the up, down and spread
	// sides (see CUSUM.Holding), nil when none is held.
	Crossed float64   `json:"crossed,omitempty"`
	Hold    []float64 `json:"hold,omitempty"`
}

// CUSUMARL is Siegmund's approximation of the average run length of a
// one-sided CUSUM with threshold h whose increments (zₙ − k) are Gaussian
// with the given mean and unit variance (Siegmund 1985, "Sequential
// Analysis", ch. X; Basseville & Nikiforov 1993, "Detection of Abrupt
// Changes", eq. 5.2.44):
//
//	ARL(μ, h) = (e^{−2μb} + 2μb − 1) / (2μ²),  b = h + 1.166
//
// (b² when μ = 0). A negative mean (−k under no drift) gives the
// in-control run length, the mean gap between false alarms; a positive one
// (δ − k after a shift of δ) the expected detection delay, ≈ b/μ. The
// 1.166 (= −2ζ(½)/√(2π)) corrects for the overshoot of the threshold.
func CUSUMARL(mean, h float64) float64 {
	b := h + 1.166
	if math.Abs(mean) < 1e-9 {
		return b * b
	}
	x := 2 * mean * b
	return (math.Exp(-x) + x - 1) / (2 * mean * mean)
}

// CUSUMThreshold returns the threshold h at which a one-sided CUSUM with
// allowance k > 0 over N(0, 1) values has an in-control average run length
// of arl rows: the root of CUSUMARL(−k, h) = arl, found by bisection. For a
// large arl it is about ln(2k²·arl)/(2k) − 1.166. It returns 0 when arl is
// so short that any positive h exceeds it.
func CUSUMThreshold(arl, k float64) float64 {
	lo, hi := 0.0, 1.0
	if CUSUMARL(-k, lo) >= arl {
		return 0
	}
	for CUSUMARL(-k, hi) < arl {
		lo, hi = hi, 2*hi
	}
	for range 100 {
		mid := (lo + hi) / 2
		if CUSUMARL(-k, mid) < arl {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// holdCap bounds a held statistic, in multiples of its threshold: a drift
// that lasts builds up to twice the evidence that raised the alarm, so a
// weak one (10% of rows from another class, whose spread statistic climbs
// by a few hundredths a row) is not cleared by a quiet spell, and the clear
// after a drift ends comes after at most twice the rows that
// a side needs to fall from its threshold to 0.
const holdCap = 2

package sweep

import (
	"math"
	"math/rand/v2"
	"slices"
)

// rngFor draws a history's next proposal: the same seed and history
// length give the same stream.
func rngFor(seed uint64, history []Trial) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(len(history))+0x5eed))
}

// random draws every parameter uniformly (log-uniformly where Log).
type random struct {
	space Space
	seed  uint64
}

func (r *random) Next(history []Trial) (Point, bool) {
	return sample(r.space, rngFor(r.seed, history)), true
}

func sample(space Space, rng *rand.Rand) Point {
	p := make(Point, len(space))
	for i, prm := range space {
		p[i] = sampleParam(prm, rng)
	}
	return p
}

func sampleParam(prm Param, rng *rand.Rand) float64 {
	if prm.Kind == Categorical {
		return float64(rng.IntN(len(prm.Choices)))
	}
	lo, hi := bounds(prm)
	return fromInternal(prm, lo+rng.Float64()*(hi-lo))
}

// bounds are a numeric parameter's bounds in the space TPE models it in:
// log for Log parameters; ints are widened by half a step so each whole
// value gets an equal share.
func bounds(prm Param) (lo, hi float64) {
	lo, hi = prm.Min, prm.Max
	if prm.Kind == Int {
		lo, hi = lo-0.5, hi+0.5
		if prm.Log {
			lo = math.Max(lo, prm.Min*0.5)
		}
	}
	if prm.Log {
		return math.Log(lo), math.Log(hi)
	}
	return lo, hi
}

func toInternal(prm Param, v float64) float64 {
	if prm.Log {
		return math.Log(v)
	}
	return v
}

func fromInternal(prm Param, u float64) float64 {
	v := u
	if prm.Log {
		v = math.Exp(u)
	}
	if prm.Kind == Int {
		v = math.Round(v)
	}
	return math.Min(math.Max(v, prm.Min), prm.Max)
}

// grid walks the cartesian product of each parameter's grid values, the
// first parameter fastest.
type grid struct {
	values [][]float64
	total  int
}

func newGrid(space Space, points int) *grid {
	g := &grid{total: 1}
	for _, prm := range space {
		var vs []float64
		switch {
		case prm.Kind == Categorical:
			for i := range prm.Choices {
				vs = append(vs, float64(i))
			}
		case prm.Min == prm.Max || points == 1:
			vs = []float64{prm.Min}
		default:
			lo, hi := toInternal(prm, prm.Min), toInternal(prm, prm.Max)
			for i := range points {
				v := fromInternal(prm, lo+(hi-lo)*float64(i)/float64(points-1))
				if !slices.Contains(vs, v) {
					vs = append(vs, v)
				}
			}
		}
		g.values = append(g.values, vs)
		g.total *= len(vs)
	}
	return g
}

func (g *grid) Next(history []Trial) (Point, bool) {
	k := len(history)
	if k >= g.total {
		return nil, false
	}
	p := make(Point, len(g.values))
	for i, vs := range g.values {
		p[i] = vs[k%len(vs)]
		k /= len(vs)
	}
	return p, true
}

// tpe is the Tree-structured Parzen Estimator of Bergstra, Bardenet,
// Bengio and Kégl (2011), "Algorithms for Hyper-Parameter Optimization",
// in its independent (univariate) form: the finished trials are split at
// the Gamma quantile of their values into good and bad, each parameter's
// good and bad values are modelled by Parzen windows l(x) and g(x) (with a
// uniform prior), and the next value of each parameter is the one of
// Candidates draws from l that maximises l(x)/g(x).
type tpe struct {
	space Space
	seed  uint64
	opts  Options
}

func (t *tpe) Next(history []Trial) (Point, bool) {
	rng := rngFor(t.seed, history)
	var done []Trial
	for _, tr := range history {
		if tr.Done && !math.IsNaN(tr.Value) {
			done = append(done, tr)
		}
	}
	if len(done) < t.opts.Startup {
		return sample(t.space, rng), true
	}
	slices.SortStableFunc(done, func(a, b Trial) int {
		if t.opts.Maximize {
			a, b = b, a
		}
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})
	nGood := max(1, int(math.Ceil(t.opts.Gamma*float64(len(done)))))
	good, bad := done[:nGood], done[nGood:]
	p := make(Point, len(t.space))
	for i, prm := range t.space {
		gv, bv := column(good, i), column(bad, i)
		if prm.Kind == Categorical {
			p[i] = t.nextChoice(prm, gv, bv, rng)
			continue
		}
		p[i] = t.nextNumber(prm, gv, bv, rng)
	}
	return p, true
}

func column(trials []Trial, i int) []float64 {
	out := make([]float64, len(trials))
	for k, tr := range trials {
		out[k] = tr.Point[i]
	}
	return out
}

func (t *tpe) nextChoice(prm Param, good, bad []float64, rng *rand.Rand) float64 {
	k := len(prm.Choices)
	weights := func(obs []float64) []float64 {
		w := make([]float64, k)
		for c := range w {
			w[c] = 1 // the prior: one pseudo-observation per choice
		}
		for _, o := range obs {
			w[int(o)]++
		}
		sum := float64(len(obs) + k)
		for c := range w {
			w[c] /= sum
		}
		return w
	}
	l, g := weights(good), weights(bad)
	best, bestRatio := 0, math.Inf(-1)
	for range t.opts.Candidates {
		u, c := rng.Float64(), 0
		for acc := l[0]; acc < u && c < k-1; acc += l[c] {
			c++
		}
		if r := l[c] / g[c]; r > bestRatio {
			best, bestRatio = c, r
		}
	}
	return float64(best)
}

// parzen is a mixture of one Gaussian per observation and a uniform
// prior over [lo, hi], each of equal weight. Each Gaussian's width is the
// larger gap to its neighbours (the bounds count as neighbours), clipped
// to [range/min(100, n+1), range], as in Hyperopt's adaptive Parzen
// estimator.
type parzen struct {
	lo, hi  float64
	centres []float64
	sigmas  []float64
}

func newParzen(prm Param, obs []float64) parzen {
	lo, hi := bounds(prm)
	pz := parzen{lo: lo, hi: hi}
	for _, o := range obs {
		pz.centres = append(pz.centres, toInternal(prm, o))
	}
	slices.Sort(pz.centres)
	span := hi - lo
	floor := span / math.Min(100, float64(len(obs)+1))
	for i, c := range pz.centres {
		left, right := lo, hi
		if i > 0 {
			left = pz.centres[i-1]
		}
		if i+1 < len(pz.centres) {
			right = pz.centres[i+1]
		}
		pz.sigmas = append(pz.sigmas, math.Min(span, math.Max(floor, math.Max(c-left, right-c))))
	}
	return pz
}

func (pz parzen) density(u float64) float64 {
	w := 1 / float64(len(pz.centres)+1)
	d := w / math.Max(pz.hi-pz.lo, 1e-12)
	for i, c := range pz.centres {
		s := math.Max(pz.sigmas[i], 1e-12)
		z := (u - c) / s
		d += w * math.Exp(-0.5*z*z) / (s * math.Sqrt(2*math.Pi))
	}
	return d
}

func (pz parzen) draw(rng *rand.Rand) float64 {
	k := rng.IntN(len(pz.centres) + 1)
	if k == len(pz.centres) {
		return pz.lo + rng.Float64()*(pz.hi-pz.lo)
	}
	u := pz.centres[k] + rng.NormFloat64()*pz.sigmas[k]
	return math.Min(math.Max(u, pz.lo), pz.hi)
}

func (t *tpe) nextNumber(prm Param, good, bad []float64, rng *rand.Rand) float64 {
	if prm.Min == prm.Max {
		return prm.Min
	}
	l, g := newParzen(prm, good), newParzen(prm, bad)
	best, bestRatio := l.draw(rng), math.Inf(-1)
	for range t.opts.Candidates {
		u := l.draw(rng)
		if r := l.density(u) / g.density(u); r > bestRatio {
			best, bestRatio = u, r
		}
	}
	return fromInternal(prm, best)
}

// MedianStop is the median stopping rule (Golovin et al. 2017, "Google
// Vizier", §3.2.2): a trial that has reported curve (its objective per
// step) stops when its best value so far is worse than the median, over
// the finished trials, of their running averages up to the same step. It
// never stops a trial before minSteps steps, or while no trial has
// finished.
func MedianStop(curve []float64, finished [][]float64, maximize bool, minSteps int) bool {
	s := len(curve)
	if s == 0 || s < minSteps {
		return false
	}
	var avgs []float64
	for _, c := range finished {
		n := min(s, len(c))
		if n == 0 {
			continue
		}
		sum := 0.0
		for _, v := range c[:n] {
			sum += v
		}
		avgs = append(avgs, sum/float64(n))
	}
	if len(avgs) == 0 {
		return false
	}
	slices.Sort(avgs)
	median := avgs[len(avgs)/2]
	if len(avgs)%2 == 0 {
		median = (avgs[len(avgs)/2-1] + avgs[len(avgs)/2]) / 2
	}
	best := curve[0]
	for _, v := range curve[1:] {
		if (maximize && v > best) || (!maximize && v < best) {
			best = v
		}
	}
	if maximize {
		return best < median
	}
	return best > median
}

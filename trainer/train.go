package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// Model kinds the built-in trainer fits.
const (
	// KindLogistic is (multinomial) logistic regression.
	KindLogistic = "logistic"
	// KindMLP is a multilayer perceptron with Relu hidden layers.
	KindMLP = "mlp"
)

// ErrConfig is returned, wrapped with every problem, for an invalid Config.
var ErrConfig = errors.New("trainer: invalid config")

// Config tunes the built-in trainer. The zero value is valid and means the
// documented defaults: logistic regression, Adam, 100 epochs.
type Config struct {
	// Kind is KindLogistic (default) or KindMLP.
	Kind string
	// Hidden are the MLP's hidden layer widths. Default [32, 32]. Ignored
	// for KindLogistic.
	Hidden []int
	// Epochs is the number of passes over the training rows. Default 100.
	Epochs int
	// BatchSize is the mini-batch size. Default 32.
	BatchSize int
	// LearningRate is Adam's step size α. Default 0.01.
	LearningRate float64
	// L2 is the weight-decay coefficient added to the loss as
	// (L2/2)·‖W‖² (biases excluded). Default 0.
	L2 float64
	// Holdout is the fraction of rows kept out of training to measure
	// Accuracy. Default 0.2; negative means none (accuracy on the
	// training rows). No holdout is taken from fewer than 10 rows.
	Holdout float64
	// Seed drives initialisation, the holdout split and shuffling; the
	// same data, config and seed give the same model bytes.
	Seed int64
	// Summary tunes the reference summary. Zero means drift's defaults.
	Summary drift.SummaryOptions
	// ONNX names the model's input and output and carries metadata. Zero
	// means the encoder's defaults ("input", "output").
	ONNX onnx.Options
	// Progress, when set, is called after every epoch with the epoch's
	// accuracy (holdout, as Result.Accuracy) and mean training loss. It
	// costs a forward pass over every row per epoch.
	Progress func(Step) `json:"-"`
}

// ClassNamesKey is the ONNX metadata key under which a model trained on
// named classes carries their names, a JSON array indexed by class.
const ClassNamesKey = "strata.class_names"

// Config defaults.
const (
	DefaultEpochs       = 100
	DefaultBatchSize    = 32
	DefaultLearningRate = 0.01
	DefaultHoldout      = 0.2
)

// DefaultHidden is the MLP's default hidden layer widths.
var DefaultHidden = []int{32, 32}

// EnsureDefaults fills zero fields with their documented defaults.
func (c *Config) EnsureDefaults() {
	if c.Kind == "" {
		c.Kind = KindLogistic
	}
	if c.Kind == KindMLP && len(c.Hidden) == 0 {
		c.Hidden = append([]int(nil), DefaultHidden...)
	}
	if c.Epochs == 0 {
		c.Epochs = DefaultEpochs
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.LearningRate == 0 {
		c.LearningRate = DefaultLearningRate
	}
	if c.Holdout == 0 {
		c.Holdout = DefaultHoldout
	}
}

// Validate reports every problem with the config joined into one error
// wrapping ErrConfig. Zero fields are valid (they mean defaults).
func (c Config) Validate() error {
	var errs []error
	switch c.Kind {
	case "", KindLogistic, KindMLP:
	default:
		errs = append(errs, fmt.Errorf("kind %q: want %q or %q", c.Kind, KindLogistic, KindMLP))
	}
	for i, h := range c.Hidden {
		if h <= 0 {
			errs = append(errs, fmt.Errorf("hidden[%d] = %d: widths must be positive", i, h))
		}
	}
	if c.Epochs < 0 || c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("epochs %d and batch size %d must not be negative", c.Epochs, c.BatchSize))
	}
	if c.LearningRate < 0 || math.IsNaN(c.LearningRate) || c.L2 < 0 || math.IsNaN(c.L2) {
		errs = append(errs, fmt.Errorf("learning rate %v and L2 %v must not be negative", c.LearningRate, c.L2))
	}
	if c.Holdout >= 1 {
		errs = append(errs, fmt.Errorf("holdout %v must be below 1", c.Holdout))
	}
	if err := c.ONNX.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// Result is a trained model.
type Result struct {
	// Model is the ONNX encoding. Its input is [N, len(Features)] raw
	// (unstandardised) features: standardisation is folded into the first
	// layer. Its output is [N, 1] P(class 1) for two classes and [N,
	// Classes] softmax probabilities otherwise.
	Model []byte
	// Layers are the model's layers (standardisation folded in), for
	// onnx.Predict.
	Layers []onnx.Layer
	// Features are the input column names, in order.
	Features []string
	// Classes is the number of classes.
	Classes int
	// ClassNames are the classes' names, from a CSV whose labels were
	// names; nil for numbered classes. The model carries them in its
	// metadata as strata.class_names (a JSON array).
	ClassNames []string
	// Accuracy is measured on the holdout rows (on the training rows when
	// there is no holdout).
	Accuracy float64
	// TrainAccuracy is measured on the training rows.
	TrainAccuracy float64
	// Loss is the mean cross-entropy on the training rows after the last
	// epoch.
	Loss float64
	// TrainRows and HoldoutRows count the split.
	TrainRows, HoldoutRows int
	// Reference summarises the training rows per feature and the model's
	// score on them (P(class 1), or the predicted class for more than two
	// classes), for drift detection.
	Reference drift.Reference
}

// evaluate is the network's accuracy (on the holdout rows, or the
// training rows when there are none) and mean cross-entropy on the
// training rows.
func evaluate(n *net, z []float64, y []int, f int, trainIdx, holdIdx []int, ws *workspace) (acc, loss float64) {
	for _, r := range trainIdx {
		loss += crossEntropy(n.forward(z[r*f:(r+1)*f], ws), y[r])
	}
	loss /= float64(max(1, len(trainIdx)))
	rows := holdIdx
	if len(rows) == 0 {
		rows = trainIdx
	}
	correct := 0
	for _, r := range rows {
		if predictClass(n.forward(z[r*f:(r+1)*f], ws)) == y[r] {
			correct++
		}
	}
	return float64(correct) / float64(max(1, len(rows))), loss
}

// Train fits cfg.Kind to ds with seeded mini-batch Adam (Kingma & Ba 2015,
// "Adam: A Method for Stochastic Optimization") on cross-entropy. It checks
// ctx between epochs. Errors wrap ErrConfig, ErrDataset or ctx.Err().
func Train(ctx context.Context, ds *Dataset, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.EnsureDefaults()
	if err := ds.validate(); err != nil {
		return nil, err
	}
	f, rows := len(ds.Features), ds.Rows()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7a11))
	perm := rng.Perm(rows)
	nHold := 0
	if cfg.Holdout > 0 && rows >= 10 {
		nHold = int(math.Round(cfg.Holdout * float64(rows)))
	}
	trainIdx, holdIdx := perm[nHold:], perm[:nHold]
	mean, std, z := standardise(ds, trainIdx)

	outs := ds.Classes
	if outs == 2 {
		outs = 1
	}
	sizes := []int{f}
	if cfg.Kind == KindMLP {
		sizes = append(sizes, cfg.Hidden...)
	}
	sizes = append(sizes, outs)
	n := newNet(sizes, rng)
	ws := n.workspace()
	if err := fit(ctx, n, ds, z, trainIdx, holdIdx, ws, rng, cfg); err != nil {
		return nil, err
	}

	res := &Result{Features: append([]string(nil), ds.Features...), Classes: ds.Classes, TrainRows: len(trainIdx), HoldoutRows: nHold}
	var loss float64
	var correctTrain, correctHold int
	for _, r := range trainIdx {
		p := n.forward(z[r*f:(r+1)*f], ws)
		loss += crossEntropy(p, ds.Y[r])
		if predictClass(p) == ds.Y[r] {
			correctTrain++
		}
	}
	for _, r := range holdIdx {
		if predictClass(n.forward(z[r*f:(r+1)*f], ws)) == ds.Y[r] {
			correctHold++
		}
	}
	res.Loss = loss / float64(len(trainIdx))
	res.TrainAccuracy = float64(correctTrain) / float64(len(trainIdx))
	res.Accuracy = res.TrainAccuracy
	if nHold > 0 {
		res.Accuracy = float64(correctHold) / float64(nHold)
	}

	res.Layers = n.export(mean, std)
	if err := encodeModel(res, ds, cfg); err != nil {
		return nil, err
	}
	ref, err := reference(res.Layers, ds, trainIdx, cfg)
	if err != nil {
		return nil, err
	}
	res.Reference = ref
	return res, nil
}

// standardise returns the training rows' per-feature mean and std (1 for a
// constant column) and every row of ds standardised with them.
func standardise(ds *Dataset, trainIdx []int) (mean, std, z []float64) {
	f := len(ds.Features)
	mean, std = make([]float64, f), make([]float64, f)
	for _, r := range trainIdx {
		for j := 0; j < f; j++ {
			mean[j] += ds.X[r*f+j]
		}
	}
	for j := range mean {
		mean[j] /= float64(len(trainIdx))
	}
	for _, r := range trainIdx {
		for j := 0; j < f; j++ {
			d := ds.X[r*f+j] - mean[j]
			std[j] += d * d
		}
	}
	for j := range std {
		std[j] = math.Sqrt(std[j] / float64(len(trainIdx)))
		if std[j] < 1e-12 {
			std[j] = 1 // a constant column carries no information
		}
	}
	z = make([]float64, len(ds.X))
	for i, v := range ds.X {
		j := i % f
		z[i] = (v - mean[j]) / std[j]
	}
	return mean, std, z
}

// fit runs cfg.Epochs of mini-batch Adam over the training rows of z,
// shuffled by rng, reporting each epoch to cfg.Progress.
func fit(ctx context.Context, n *net, ds *Dataset, z []float64, trainIdx, holdIdx []int, ws *workspace, rng *rand.Rand, cfg Config) error {
	f := len(ds.Features)
	opt := newAdam(n, cfg.LearningRate)
	g := n.zeroLike()
	for epoch := 0; epoch < cfg.Epochs; epoch++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rng.Shuffle(len(trainIdx), func(a, b int) { trainIdx[a], trainIdx[b] = trainIdx[b], trainIdx[a] })
		for s := 0; s < len(trainIdx); s += cfg.BatchSize {
			batch := trainIdx[s:min(s+cfg.BatchSize, len(trainIdx))]
			g.zero()
			for _, r := range batch {
				n.backprop(z[r*f:(r+1)*f], ds.Y[r], ws, g)
			}
			g.scale(1 / float64(len(batch)))
			if cfg.L2 > 0 {
				for l := range g.w {
					for k := range g.w[l] {
						g.w[l][k] += cfg.L2 * n.w[l][k]
					}
				}
			}
			opt.step(n, g)
		}
		if cfg.Progress != nil {
			acc, loss := evaluate(n, z, ds.Y, f, trainIdx, holdIdx, ws)
			cfg.Progress(Step{Step: epoch + 1, Metrics: map[string]float64{"accuracy": acc, "loss": loss}})
		}
	}
	return nil
}

// encodeModel writes res.Layers as an ONNX model into res.Model, with the
// metadata that names its kind, classes and features.
func encodeModel(res *Result, ds *Dataset, cfg Config) error {
	opts := cfg.ONNX
	if opts.Metadata == nil {
		opts.Metadata = map[string]string{}
	} else {
		m := make(map[string]string, len(opts.Metadata)+3)
		for k, v := range opts.Metadata {
			m[k] = v
		}
		opts.Metadata = m
	}
	opts.Metadata["strata.kind"] = cfg.Kind
	opts.Metadata["strata.classes"] = strconv.Itoa(ds.Classes)
	opts.Metadata["strata.features"] = joinNames(ds.Features)
	if ds.ClassNames != nil {
		b, _ := json.Marshal(ds.ClassNames)
		opts.Metadata[ClassNamesKey] = string(b)
		res.ClassNames = append([]string(nil), ds.ClassNames...)
	}
	model, err := onnx.MLP(res.Layers, opts)
	if err != nil {
		return fmt.Errorf("trainer: encode model: %w", err)
	}
	res.Model = model
	return nil
}

// reference summarises the training rows as the model will see them (raw),
// and the served model's score on them (see scores): the drift reference.
func reference(layers []onnx.Layer, ds *Dataset, trainIdx []int, cfg Config) (drift.Reference, error) {
	f := len(ds.Features)
	trainX := make([]float64, 0, len(trainIdx)*f)
	for _, r := range trainIdx {
		trainX = append(trainX, ds.X[r*f:(r+1)*f]...)
	}
	ref, err := drift.SummarizeColumns(ds.Features, trainX, cfg.Summary)
	if err != nil {
		return ref, fmt.Errorf("trainer: reference summary: %w", err)
	}
	pred, err := drift.Summarize("prediction", scores(layers, ds, trainIdx), cfg.Summary)
	if err != nil {
		return ref, fmt.Errorf("trainer: reference summary: %w", err)
	}
	ref.Prediction = &pred
	return ref, nil
}

// scores is the model's score of ds's rows as the served model computes
// it, in float32 (onnx.Predict, which ONNX Runtime's results are checked
// against): P(class 1) for two classes, else the predicted class. Scored
// in float64 instead, a confident model's scores just below 1 stay
// distinct where the served model's round to exactly 1.0 (a logistic
// regression on separable data has many such rows), and a KS test of
// live scores against them alarmed on stable traffic.
func scores(layers []onnx.Layer, ds *Dataset, rows []int) []float64 {
	f := len(ds.Features)
	x := make([]float32, 0, len(rows)*f)
	for _, r := range rows {
		for _, v := range ds.X[r*f : (r+1)*f] {
			x = append(x, float32(v))
		}
	}
	n := len(rows)
	out := onnx.Predict(layers, x, n)
	k := len(out) / max(n, 1)
	s := make([]float64, n)
	p := make([]float64, k)
	for r := range n {
		for j := range k {
			p[j] = float64(out[r*k+j])
		}
		if k == 1 {
			s[r] = p[0]
		} else {
			s[r] = float64(predictClass(p))
		}
	}
	return s
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

func predictClass(p []float64) int {
	if len(p) == 1 {
		if p[0] >= 0.5 {
			return 1
		}
		return 0
	}
	best := 0
	for k, v := range p {
		if v > p[best] {
			best = k
		}
	}
	return best
}

func crossEntropy(p []float64, y int) float64 {
	const eps = 1e-12
	if len(p) == 1 {
		if y == 1 {
			return -math.Log(p[0] + eps)
		}
		return -math.Log(1 - p[0] + eps)
	}
	return -math.Log(p[y] + eps)
}

// net is a dense network in float64: Relu hidden layers, then a sigmoid (one
// output) or softmax head. w[l] is row-major [in][out].
type net struct {
	sizes []int
	w, b  [][]float64
}

func newNet(sizes []int, rng *rand.Rand) *net {
	n := &net{sizes: sizes}
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		limit := math.Sqrt(6 / float64(in+out)) // Glorot & Bengio (2010)
		if l+2 < len(sizes) {
			limit = math.Sqrt(6 / float64(in)) // He et al. (2015) for Relu
		}
		w := make([]float64, in*out)
		for k := range w {
			w[k] = (rng.Float64()*2 - 1) * limit
		}
		n.w = append(n.w, w)
		n.b = append(n.b, make([]float64, out))
	}
	return n
}

func (n *net) zeroLike() *net {
	g := &net{sizes: n.sizes}
	for l := range n.w {
		g.w = append(g.w, make([]float64, len(n.w[l])))
		g.b = append(g.b, make([]float64, len(n.b[l])))
	}
	return g
}

func (n *net) zero() {
	for l := range n.w {
		clear(n.w[l])
		clear(n.b[l])
	}
}

func (n *net) scale(s float64) {
	for l := range n.w {
		for k := range n.w[l] {
			n.w[l][k] *= s
		}
		for k := range n.b[l] {
			n.b[l][k] *= s
		}
	}
}

// workspace holds per-layer activations and deltas for one row.
type workspace struct{ act, delta [][]float64 }

func (n *net) workspace() *workspace {
	ws := &workspace{}
	for _, s := range n.sizes {
		ws.act = append(ws.act, make([]float64, s))
		ws.delta = append(ws.delta, make([]float64, s))
	}
	return ws
}

// forward computes the output for one standardised row; the result aliases
// the workspace.
func (n *net) forward(x []float64, ws *workspace) []float64 {
	copy(ws.act[0], x)
	last := len(n.w) - 1
	for l := range n.w {
		in, out := ws.act[l], ws.act[l+1]
		copy(out, n.b[l])
		cols := len(out)
		for i, xi := range in {
			if xi == 0 {
				continue
			}
			row := n.w[l][i*cols : (i+1)*cols]
			for j, w := range row {
				out[j] += xi * w
			}
		}
		switch {
		case l < last:
			for j, v := range out {
				out[j] = math.Max(0, v)
			}
		case cols == 1:
			out[0] = 1 / (1 + math.Exp(-out[0]))
		default:
			m := math.Inf(-1)
			for _, v := range out {
				m = math.Max(m, v)
			}
			var s float64
			for j, v := range out {
				out[j] = math.Exp(v - m)
				s += out[j]
			}
			for j := range out {
				out[j] /= s
			}
		}
	}
	return ws.act[len(ws.act)-1]
}

// backprop adds the cross-entropy gradient for one row to g. For a sigmoid
// or softmax head with cross-entropy, the output delta is p - onehot(y).
func (n *net) backprop(x []float64, y int, ws *workspace, g *net) {
	p := n.forward(x, ws)
	L := len(n.w)
	d := ws.delta[L]
	if len(p) == 1 {
		d[0] = p[0] - float64(y)
	} else {
		copy(d, p)
		d[y]--
	}
	for l := L - 1; l >= 0; l-- {
		in, dout := ws.act[l], ws.delta[l+1]
		cols := len(dout)
		for j, dj := range dout {
			g.b[l][j] += dj
		}
		din := ws.delta[l]
		for i, xi := range in {
			row := n.w[l][i*cols : (i+1)*cols]
			grow := g.w[l][i*cols : (i+1)*cols]
			var s float64
			for j, dj := range dout {
				grow[j] += xi * dj
				s += row[j] * dj
			}
			if l > 0 && xi <= 0 { // Relu'(z) = 0 where the activation is 0
				s = 0
			}
			din[i] = s
		}
	}
}

// export folds standardisation z = (x-mean)/std into the first layer and
// rounds to float32: W'[i][j] = W[i][j]/std[i], b'[j] = b[j] - Σ_i W[i][j]·mean[i]/std[i].
func (n *net) export(mean, std []float64) []onnx.Layer {
	layers := make([]onnx.Layer, len(n.w))
	last := len(n.w) - 1
	for l := range n.w {
		in, out := n.sizes[l], n.sizes[l+1]
		ly := onnx.Layer{In: in, Out: out, Weights: make([]float32, in*out), Bias: make([]float32, out), Activation: onnx.Relu}
		bias := append([]float64(nil), n.b[l]...)
		for i := 0; i < in; i++ {
			for j := 0; j < out; j++ {
				w := n.w[l][i*out+j]
				if l == 0 {
					bias[j] -= w * mean[i] / std[i]
					w /= std[i]
				}
				ly.Weights[i*out+j] = float32(w)
			}
		}
		for j, v := range bias {
			ly.Bias[j] = float32(v)
		}
		if l == last {
			ly.Activation = onnx.Sigmoid
			if out > 1 {
				ly.Activation = onnx.Softmax
			}
		}
		layers[l] = ly
	}
	return layers
}

// adam is the Adam optimiser state (β1 = 0.9, β2 = 0.999, ε = 1e-8).
type adam struct {
	lr   float64
	t    int
	m, v *net
}

func newAdam(n *net, lr float64) *adam {
	return &adam{lr: lr, m: n.zeroLike(), v: n.zeroLike()}
}

func (a *adam) step(n, g *net) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	a.t++
	c1 := 1 - math.Pow(b1, float64(a.t))
	c2 := 1 - math.Pow(b2, float64(a.t))
	upd := func(p, gr, m, v []float64) {
		for k := range p {
			m[k] = b1*m[k] + (1-b1)*gr[k]
			v[k] = b2*v[k] + (1-b2)*gr[k]*gr[k]
			p[k] -= a.lr * (m[k] / c1) / (math.Sqrt(v[k]/c2) + eps)
		}
	}
	for l := range n.w {
		upd(n.w[l], g.w[l], a.m.w[l], a.v.w[l])
		upd(n.b[l], g.b[l], a.m.b[l], a.v.b[l])
	}
}

package infer

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	ort "github.com/yalue/onnxruntime_go"
)

// ErrModelNotFound is returned for a model (or model version) this server
// does not hold.
var ErrModelNotFound = errors.New("infer: model not found")

// ErrBadInput is wrapped by errors about a request's tensors: missing or
// unknown names, wrong datatype, wrong shape, data that does not match its
// shape. The HTTP handler answers it with 400.
var ErrBadInput = errors.New("infer: bad input")

// ErrUnsupportedModel is returned by Load for models the server cannot run
// even though ONNX Runtime loads them: models with no inputs or no outputs
// (the Go binding needs at least one of each).
var ErrUnsupportedModel = errors.New("infer: unsupported model")

// TensorInfo describes one input or output of a model as the model declares
// it. A dimension of -1 is dynamic.
type TensorInfo struct {
	Name     string   `json:"name"`
	Datatype Datatype `json:"datatype"`
	Shape    []int64  `json:"shape"`
}

// ModelInfo describes a loaded model version.
type ModelInfo struct {
	Name    string       `json:"name"`
	Version string       `json:"version"`
	Inputs  []TensorInfo `json:"inputs"`
	Outputs []TensorInfo `json:"outputs"`
	// Batching reports whether requests to this version are batched.
	Batching bool `json:"batching"`
}

// version is one loaded model version: an ONNX Runtime session and what the
// model declares. It is reference counted so that a swapped-out version
// closes only when its last in-flight request has finished.
type version struct {
	info    ModelInfo
	sess    *ort.DynamicAdvancedSession
	batcher *batcher
	// rowElems is, per input, the element count of one row (the product of
	// the dimensions after the first); used by batching and sampling.
	rowElems []int
	// classes names the columns of a one-output classifier the built-in
	// trainer made from named classes (its strata.class_names metadata).
	classes []string

	refs      atomic.Int64
	retired   atomic.Bool
	closeOnce sync.Once
	closed    atomic.Bool
}

func infoFrom(ios []ort.InputOutputInfo, what string) ([]TensorInfo, error) {
	out := make([]TensorInfo, len(ios))
	for i, io := range ios {
		if io.OrtValueType == ort.ONNXTypeSequence && what == "output" {
			// A classifier's probabilities as a sequence of maps
			// (ZipMap): served as FP32 [rows, classes], the class keys
			// in the output's parameters.
			out[i] = TensorInfo{Name: io.Name, Datatype: FP32, Shape: []int64{-1, -1}}
			continue
		}
		if io.OrtValueType != ort.ONNXTypeTensor {
			return nil, fmt.Errorf("%w: %s %q is a %v, not a tensor", ErrUnsupportedDatatype, what, io.Name, io.OrtValueType)
		}
		dt, ok := datatypeOf(io.DataType)
		if !ok && dt == BYTES && what == "output" {
			ok = true // string labels are returned, not taken
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s %q has element type %s", ErrUnsupportedDatatype, what, io.Name, dt)
		}
		if len(io.Dimensions) == 0 {
			return nil, fmt.Errorf("%s %q: %w", what, io.Name, ErrScalarTensor)
		}
		out[i] = TensorInfo{Name: io.Name, Datatype: dt, Shape: slices.Clone([]int64(io.Dimensions))}
	}
	return out, nil
}

// intraOpThreads bounds the intra-op threads a session asks for below the
// host's cores, so that ONNX Runtime's spinning workers always leave a core
// to the agent (which must answer its peers' probes to stay alive in the
// mesh) and to the requests themselves; one core or none left means 1.
func intraOpThreads(want, cores int) int {
	return max(1, min(want, cores-1))
}

func newVersion(name, ver string, model []byte, cfg *Config) (*version, error) {
	ins, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("infer: read model %s version %s: %w", name, ver, explainLoad(err, model))
	}
	if len(ins) == 0 || len(outs) == 0 {
		return nil, fmt.Errorf("%w: model %s version %s has %d inputs and %d outputs; at least one of each is needed", ErrUnsupportedModel, name, ver, len(ins), len(outs))
	}
	v := &version{info: ModelInfo{Name: name, Version: ver}}
	if v.info.Inputs, err = infoFrom(ins, "input"); err != nil {
		return nil, err
	}
	if v.info.Outputs, err = infoFrom(outs, "output"); err != nil {
		return nil, err
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("infer: session options: %w", err)
	}
	defer opts.Destroy()
	if cfg.IntraOpThreads > 0 {
		if err := opts.SetIntraOpNumThreads(intraOpThreads(cfg.IntraOpThreads, runtime.NumCPU())); err != nil {
			return nil, fmt.Errorf("infer: session options: %w", err)
		}
	}
	names := func(ts []TensorInfo) []string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = t.Name
		}
		return s
	}
	v.sess, err = ort.NewDynamicAdvancedSessionWithONNXData(model, names(v.info.Inputs), names(v.info.Outputs), opts)
	if err != nil {
		return nil, fmt.Errorf("infer: load model %s version %s: %w", name, ver, explainLoad(err, model))
	}
	v.classes = classNames(v.sess, v.info.Outputs)
	v.rowElems = make([]int, len(v.info.Inputs))
	for i, in := range v.info.Inputs {
		v.rowElems[i] = rowElems(in.Shape)
	}
	if !cfg.DisableBatching && cfg.MaxBatch > 1 && batchable(v.info) {
		v.info.Batching = true
	}
	return v, nil
}

// ClassNamesKey is the ONNX metadata key under which the built-in trainer
// keeps a model's class names (a JSON array, class i at index i).
const ClassNamesKey = "strata.class_names"

// classNames returns, for a model with one [rows, k] output and class
// names in its metadata, the names of the output's k columns: all of them,
// or for a two-class model's single P(class 1) column, the second. Nil
// otherwise.
func classNames(sess *ort.DynamicAdvancedSession, outs []TensorInfo) []string {
	if len(outs) != 1 || len(outs[0].Shape) != 2 {
		return nil
	}
	md, err := sess.GetModelMetadata()
	if err != nil {
		return nil
	}
	defer md.Destroy()
	s, ok, err := md.LookupCustomMetadataMap(ClassNamesKey)
	if err != nil || !ok {
		return nil
	}
	var names []string
	if json.Unmarshal([]byte(s), &names) != nil {
		return nil
	}
	switch k := outs[0].Shape[1]; {
	case k == int64(len(names)):
		return names
	case k == 1 && len(names) == 2:
		return names[1:]
	}
	return nil
}

// rowElems is the product of shape[1:], or -1 when one of them is dynamic.
func rowElems(shape []int64) int {
	n := 1
	for _, d := range shape[1:] {
		if d < 0 {
			return -1
		}
		n *= int(d)
	}
	return n
}

// batchable reports whether requests to m can share a session call: every
// input and output has a dynamic first dimension and fixed others.
func batchable(m ModelInfo) bool {
	for _, ts := range [][]TensorInfo{m.Inputs, m.Outputs} {
		for _, t := range ts {
			if t.Shape[0] >= 0 || rowElems(t.Shape) < 0 {
				return false
			}
		}
	}
	return true
}

// acquire takes a reference; the caller must hold the registry lock that
// proves v is still current.
func (v *version) acquire() { v.refs.Add(1) }

// release drops a reference, closing v if it was retired and this was the
// last.
func (v *version) release() {
	if v.refs.Add(-1) == 0 && v.retired.Load() {
		v.close()
	}
}

// retire marks v as no longer reachable from the registry; it closes once no
// request holds it.
func (v *version) retire() {
	v.retired.Store(true)
	if v.refs.Load() == 0 {
		v.close()
	}
}

func (v *version) close() {
	v.closeOnce.Do(func() {
		if v.batcher != nil {
			v.batcher.stop()
		}
		v.sess.Destroy()
		v.closed.Store(true)
	})
}

// check validates inputs against the model and returns them in the model's
// input order, with the number of rows (first dimension) they share, or -1
// when they do not share one.
func (v *version) check(inputs []Tensor) ([]Tensor, int, error) {
	ordered := make([]Tensor, len(v.info.Inputs))
	seen := make([]bool, len(v.info.Inputs))
	for _, t := range inputs {
		i := slices.IndexFunc(v.info.Inputs, func(ti TensorInfo) bool { return ti.Name == t.Name })
		if i < 0 {
			return nil, 0, fmt.Errorf("%w: model %s has no input %q (inputs: %s)", ErrBadInput, v.info.Name, t.Name, quotedNames(v.info.Inputs))
		}
		if seen[i] {
			return nil, 0, fmt.Errorf("%w: input %q given twice", ErrBadInput, t.Name)
		}
		seen[i] = true
		want := v.info.Inputs[i]
		if t.Datatype != want.Datatype {
			return nil, 0, fmt.Errorf("%w: input %q has datatype %s, the model wants %s", ErrBadInput, t.Name, t.Datatype, want.Datatype)
		}
		if len(t.Shape) == 0 {
			return nil, 0, fmt.Errorf("%w: input %q: %w", ErrBadInput, t.Name, ErrScalarTensor)
		}
		if len(t.Shape) != len(want.Shape) {
			return nil, 0, fmt.Errorf("%w: input %q has shape %v, the model wants %v (-1 is any size)", ErrBadInput, t.Name, t.Shape, want.Shape)
		}
		for d := range want.Shape {
			if want.Shape[d] >= 0 && t.Shape[d] != want.Shape[d] {
				return nil, 0, fmt.Errorf("%w: input %q has shape %v, the model wants %v (-1 is any size)", ErrBadInput, t.Name, t.Shape, want.Shape)
			}
		}
		n, err := elements(t.Shape)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: input %q: %w", ErrBadInput, t.Name, err)
		}
		if got := length(t.Data); got != n {
			return nil, 0, fmt.Errorf("%w: input %q has %d elements, its shape %v holds %d", ErrBadInput, t.Name, got, t.Shape, n)
		}
		ordered[i] = t
	}
	for i, ok := range seen {
		if !ok {
			return nil, 0, fmt.Errorf("%w: input %q is missing", ErrBadInput, v.info.Inputs[i].Name)
		}
	}
	if len(ordered) == 0 {
		return ordered, -1, nil
	}
	rows := ordered[0].Shape[0]
	for _, t := range ordered[1:] {
		if t.Shape[0] != rows {
			rows = -1
		}
	}
	return ordered, int(rows), nil
}

func quotedNames(ts []TensorInfo) string {
	s := ""
	for i, t := range ts {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", t.Name)
	}
	return s
}

// run makes one session call with inputs in model order.
func (v *version) run(inputs []Tensor) ([]Tensor, error) {
	vals := make([]ort.Value, len(inputs))
	defer func() {
		for _, x := range vals {
			if x != nil {
				x.Destroy()
			}
		}
	}()
	for i := range inputs {
		x, err := toValue(&inputs[i])
		if err != nil {
			return nil, fmt.Errorf("%w: input %q: %w", ErrBadInput, inputs[i].Name, err)
		}
		vals[i] = x
	}
	outs := make([]ort.Value, len(v.info.Outputs))
	defer func() {
		for _, x := range outs {
			if x != nil {
				x.Destroy()
			}
		}
	}()
	if err := v.sess.Run(vals, outs); err != nil {
		return nil, fmt.Errorf("infer: run model %s version %s: %w", v.info.Name, v.info.Version, err)
	}
	res := make([]Tensor, len(outs))
	for i, x := range outs {
		t, err := fromValue(v.info.Outputs[i].Name, x)
		if err != nil {
			return nil, fmt.Errorf("infer: model %s version %s: %w", v.info.Name, v.info.Version, err)
		}
		if t.Classes == nil {
			t.Classes = v.classes
		}
		res[i] = t
	}
	return res, nil
}

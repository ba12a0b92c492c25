package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrInvalidModel is returned (wrapped, with every problem joined) when the
// layers or Options cannot describe a valid model.
var ErrInvalidModel = errors.New("onnx: invalid model")

// Activation is the function applied after a layer's affine map.
type Activation string

// Activations a Layer may use.
const (
	// Identity leaves the affine output as is (logits, regression).
	Identity Activation = "identity"
	// Relu is max(0, x), element-wise.
	Relu Activation = "relu"
	// Sigmoid is 1/(1+e^-x), element-wise.
	Sigmoid Activation = "sigmoid"
	// Tanh is the hyperbolic tangent, element-wise.
	Tanh Activation = "tanh"
	// Softmax normalises each row over the last axis.
	Softmax Activation = "softmax"
)

// Layer is one dense layer: Y = act(X·W + B).
type Layer struct {
	// In is the number of inputs (features for the first layer).
	In int
	// Out is the number of outputs.
	Out int
	// Weights is row-major [In][Out]: Weights[i*Out+j] connects input i to
	// output j. Its length must be In*Out.
	Weights []float32
	// Bias has length Out.
	Bias []float32
	// Activation follows the affine map; empty means Identity.
	Activation Activation
}

// Options name and describe the encoded model. The zero value is valid and
// means the documented defaults.
type Options struct {
	// InputName is the graph input's name. Default "input".
	InputName string
	// OutputName is the graph output's name. Default "output".
	OutputName string
	// BatchDim is the symbolic name of the leading (batch) dimension.
	// Default "N".
	BatchDim string
	// GraphName is the graph's name. Default "strata".
	GraphName string
	// ProducerName is recorded in the model. Default "strata".
	ProducerName string
	// ProducerVersion is recorded in the model. Default empty.
	ProducerVersion string
	// ModelVersion is the model_version field. Default 0.
	ModelVersion int64
	// DocString describes the model. Default empty.
	DocString string
	// Opset is the default-domain operator set version. Default 13; the
	// encoder uses only operators whose semantics are unchanged from 13 on.
	Opset int64
	// Metadata is written as metadata_props, in key order.
	Metadata map[string]string
}

// Defaults for Options.
const (
	DefaultInputName  = "input"
	DefaultOutputName = "output"
	DefaultBatchDim   = "N"
	DefaultGraphName  = "strata"
	DefaultProducer   = "strata"
	DefaultOpset      = 13
	// IRVersion is the ONNX IR version written into every model.
	IRVersion = 8
)

// EnsureDefaults fills zero fields with their documented defaults.
func (o *Options) EnsureDefaults() {
	if o.InputName == "" {
		o.InputName = DefaultInputName
	}
	if o.OutputName == "" {
		o.OutputName = DefaultOutputName
	}
	if o.BatchDim == "" {
		o.BatchDim = DefaultBatchDim
	}
	if o.GraphName == "" {
		o.GraphName = DefaultGraphName
	}
	if o.ProducerName == "" {
		o.ProducerName = DefaultProducer
	}
	if o.Opset == 0 {
		o.Opset = DefaultOpset
	}
}

// Validate reports every problem with the options (after defaults) joined
// into one error wrapping ErrInvalidModel.
func (o Options) Validate() error {
	var errs []error
	if o.Opset != 0 && o.Opset < DefaultOpset {
		errs = append(errs, fmt.Errorf("opset %d: need 13 or later", o.Opset))
	}
	if o.InputName != "" && o.InputName == o.OutputName {
		errs = append(errs, fmt.Errorf("input and output are both named %q", o.InputName))
	}
	return wrap(errs)
}

func wrap(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidModel, errors.Join(errs...))
}

// ValidateLayers reports every problem with a layer stack: sizes, weight and
// bias lengths, chaining (each layer's In is the previous Out), unknown
// activations, and non-finite parameters.
func ValidateLayers(layers []Layer) error {
	var errs []error
	if len(layers) == 0 {
		errs = append(errs, errors.New("no layers"))
	}
	for i, l := range layers {
		if l.In <= 0 || l.Out <= 0 {
			errs = append(errs, fmt.Errorf("layer %d: sizes %dx%d must be positive", i, l.In, l.Out))
			continue
		}
		if len(l.Weights) != l.In*l.Out {
			errs = append(errs, fmt.Errorf("layer %d: %d weights, want In*Out = %d", i, len(l.Weights), l.In*l.Out))
		}
		if len(l.Bias) != l.Out {
			errs = append(errs, fmt.Errorf("layer %d: %d biases, want Out = %d", i, len(l.Bias), l.Out))
		}
		if i > 0 && layers[i-1].Out != l.In {
			errs = append(errs, fmt.Errorf("layer %d: In %d does not match layer %d Out %d", i, l.In, i-1, layers[i-1].Out))
		}
		switch l.Activation {
		case "", Identity, Relu, Sigmoid, Tanh, Softmax:
		default:
			errs = append(errs, fmt.Errorf("layer %d: unknown activation %q (want identity, relu, sigmoid, tanh or softmax)", i, l.Activation))
		}
		if !finite(l.Weights) || !finite(l.Bias) {
			errs = append(errs, fmt.Errorf("layer %d: parameters must be finite", i))
		}
	}
	return wrap(errs)
}

func finite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// MLP encodes a stack of dense layers as an ONNX model. It returns an error
// wrapping ErrInvalidModel when the layers or options are invalid.
func MLP(layers []Layer, opts Options) ([]byte, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateLayers(layers); err != nil {
		return nil, err
	}
	for _, name := range []string{opts.InputName, opts.OutputName} {
		if strings.HasPrefix(name, "layer") {
			return nil, fmt.Errorf("%w: name %q: names starting with \"layer\" are reserved for the model's tensors", ErrInvalidModel, name)
		}
	}
	return encodeModel(layers, opts), nil
}

// LogisticRegression encodes P(y=1|x) = sigmoid(x·w + b) as a one-layer
// model with one output column.
func LogisticRegression(weights []float32, bias float32, opts Options) ([]byte, error) {
	return MLP([]Layer{{
		In: len(weights), Out: 1,
		Weights: append([]float32(nil), weights...), Bias: []float32{bias},
		Activation: Sigmoid,
	}}, opts)
}

// RandomLayers returns an MLP with the given layer sizes (sizes[0] inputs,
// then each layer's width) and weights drawn from a seeded He-uniform
// distribution, biases small and non-zero. Hidden layers use Relu and the
// last layer Identity (logits). It needs at least two sizes, all positive.
func RandomLayers(seed int64, sizes ...int) ([]Layer, error) {
	if len(sizes) < 2 {
		return nil, fmt.Errorf("%w: need at least 2 sizes, got %d", ErrInvalidModel, len(sizes))
	}
	for _, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("%w: sizes must be positive, got %v", ErrInvalidModel, sizes)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed0a11))
	layers := make([]Layer, len(sizes)-1)
	for i := range layers {
		in, out := sizes[i], sizes[i+1]
		limit := math.Sqrt(6 / float64(in))
		l := Layer{In: in, Out: out, Weights: make([]float32, in*out), Bias: make([]float32, out), Activation: Relu}
		for k := range l.Weights {
			l.Weights[k] = float32((rng.Float64()*2 - 1) * limit)
		}
		for k := range l.Bias {
			l.Bias[k] = float32((rng.Float64()*2 - 1) * 0.1)
		}
		layers[i] = l
	}
	layers[len(layers)-1].Activation = Identity
	return layers, nil
}

// RandomMLP is RandomLayers followed by MLP with default Options: it returns
// the encoded model and the layers (for Predict as a reference).
func RandomMLP(seed int64, sizes ...int) ([]byte, []Layer, error) {
	layers, err := RandomLayers(seed, sizes...)
	if err != nil {
		return nil, nil, err
	}
	model, err := MLP(layers, Options{})
	if err != nil {
		return nil, nil, err
	}
	return model, layers, nil
}

// Predict is the pure-Go forward pass of layers over n rows of x (row-major
// [n][layers[0].In]); it returns row-major [n][last Out]. It computes in
// float64 and rounds to float32 at the end of each layer, and panics if x is
// not n*In long. It is the reference the ONNX Runtime results are checked
// against.
func Predict(layers []Layer, x []float32, n int) []float32 {
	cur := x
	for _, l := range layers {
		if len(cur) != n*l.In {
			panic(fmt.Sprintf("onnx: Predict: input has %d values, want %d", len(cur), n*l.In))
		}
		next := make([]float32, n*l.Out)
		acc := make([]float64, l.Out)
		for r := 0; r < n; r++ {
			for j := range acc {
				acc[j] = float64(l.Bias[j])
			}
			row := cur[r*l.In : (r+1)*l.In]
			for i, xi := range row {
				if xi == 0 {
					continue
				}
				w := l.Weights[i*l.Out : (i+1)*l.Out]
				for j, wij := range w {
					acc[j] += float64(xi) * float64(wij)
				}
			}
			activate(l.Activation, acc)
			for j, v := range acc {
				next[r*l.Out+j] = float32(v)
			}
		}
		cur = next
	}
	return cur
}

func activate(a Activation, v []float64) {
	switch a {
	case Relu:
		for j := range v {
			v[j] = math.Max(0, v[j])
		}
	case Sigmoid:
		for j := range v {
			v[j] = 1 / (1 + math.Exp(-v[j]))
		}
	case Tanh:
		for j := range v {
			v[j] = math.Tanh(v[j])
		}
	case Softmax:
		m := math.Inf(-1)
		for _, x := range v {
			m = math.Max(m, x)
		}
		var s float64
		for j := range v {
			v[j] = math.Exp(v[j] - m)
			s += v[j]
		}
		for j := range v {
			v[j] /= s
		}
	}
}

// Field numbers from onnx/onnx.proto.
const (
	// ModelProto
	modelIRVersion       = 1
	modelProducerName    = 2
	modelProducerVersion = 3
	modelVersion         = 5
	modelDocString       = 6
	modelGraph           = 7
	modelOpsetImport     = 8
	modelMetadataProps   = 14
	// OperatorSetIdProto
	opsetDomain  = 1
	opsetVersion = 2
	// StringStringEntryProto
	entryKey   = 1
	entryValue = 2
	// GraphProto
	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12
	// NodeProto
	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	// AttributeProto
	attrName = 1
	attrI    = 3
	attrType = 20
	// TensorProto
	tensorDims     = 1
	tensorDataType = 2
	tensorName     = 8
	tensorRawData  = 9
	// ValueInfoProto
	valueName = 1
	valueType = 2
	// TypeProto / TypeProto.Tensor / TensorShapeProto / Dimension
	typeTensor      = 1
	tensorElemType  = 1
	tensorShape     = 2
	shapeDim        = 1
	dimValue        = 1
	dimParam        = 2
	elemFloat       = 1 // TensorProto.FLOAT
	attrTypeInt     = 2 // AttributeProto.INT
	defaultDomain   = ""
	softmaxLastAxis = -1
)

func encodeModel(layers []Layer, o Options) []byte {
	var b []byte
	b = appendVarint(b, modelIRVersion, IRVersion)
	b = appendString(b, modelProducerName, o.ProducerName)
	if o.ProducerVersion != "" {
		b = appendString(b, modelProducerVersion, o.ProducerVersion)
	}
	if o.ModelVersion != 0 {
		b = appendVarint(b, modelVersion, uint64(o.ModelVersion))
	}
	if o.DocString != "" {
		b = appendString(b, modelDocString, o.DocString)
	}
	b = appendMessage(b, modelGraph, encodeGraph(layers, o))
	var opset []byte
	opset = appendString(opset, opsetDomain, defaultDomain)
	opset = appendVarint(opset, opsetVersion, uint64(o.Opset))
	b = appendMessage(b, modelOpsetImport, opset)
	keys := make([]string, 0, len(o.Metadata))
	for k := range o.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var e []byte
		e = appendString(e, entryKey, k)
		e = appendString(e, entryValue, o.Metadata[k])
		b = appendMessage(b, modelMetadataProps, e)
	}
	return b
}

func encodeGraph(layers []Layer, o Options) []byte {
	var g []byte
	cur := o.InputName
	for i, l := range layers {
		last := i == len(layers)-1
		w, bias := fmt.Sprintf("layer%d.weight", i), fmt.Sprintf("layer%d.bias", i)
		affine := fmt.Sprintf("layer%d.affine", i)
		act := l.Activation
		if act == "" {
			act = Identity
		}
		if last && act == Identity {
			affine = o.OutputName
		}
		g = appendMessage(g, graphNode, encodeNode(fmt.Sprintf("layer%d.gemm", i), "Gemm", []string{cur, w, bias}, affine, nil))
		cur = affine
		if act != Identity {
			out := fmt.Sprintf("layer%d.%s", i, act)
			if last {
				out = o.OutputName
			}
			var attrs [][]byte
			op := map[Activation]string{Relu: "Relu", Sigmoid: "Sigmoid", Tanh: "Tanh", Softmax: "Softmax"}[act]
			if act == Softmax {
				attrs = append(attrs, encodeIntAttr("axis", softmaxLastAxis))
			}
			g = appendMessage(g, graphNode, encodeNode(fmt.Sprintf("layer%d.%s", i, act), op, []string{cur}, out, attrs))
			cur = out
		}
	}
	g = appendString(g, graphName, o.GraphName)
	for i, l := range layers {
		g = appendMessage(g, graphInitializer, encodeTensor(fmt.Sprintf("layer%d.weight", i), []int64{int64(l.In), int64(l.Out)}, l.Weights))
		g = appendMessage(g, graphInitializer, encodeTensor(fmt.Sprintf("layer%d.bias", i), []int64{int64(l.Out)}, l.Bias))
	}
	g = appendMessage(g, graphInput, encodeValueInfo(o.InputName, o.BatchDim, layers[0].In))
	g = appendMessage(g, graphOutput, encodeValueInfo(o.OutputName, o.BatchDim, layers[len(layers)-1].Out))
	return g
}

func encodeNode(name, op string, inputs []string, output string, attrs [][]byte) []byte {
	var n []byte
	for _, in := range inputs {
		n = appendString(n, nodeInput, in)
	}
	n = appendString(n, nodeOutput, output)
	n = appendString(n, nodeName, name)
	n = appendString(n, nodeOpType, op)
	for _, a := range attrs {
		n = appendMessage(n, nodeAttribute, a)
	}
	return n
}

func encodeIntAttr(name string, v int64) []byte {
	var a []byte
	a = appendString(a, attrName, name)
	a = appendVarint(a, attrI, uint64(v))
	a = appendVarint(a, attrType, attrTypeInt)
	return a
}

func encodeTensor(name string, dims []int64, data []float32) []byte {
	var t []byte
	var packed []byte
	for _, d := range dims {
		packed = protowire.AppendVarint(packed, uint64(d))
	}
	t = protowire.AppendTag(t, tensorDims, protowire.BytesType)
	t = protowire.AppendBytes(t, packed)
	t = appendVarint(t, tensorDataType, elemFloat)
	t = appendString(t, tensorName, name)
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	t = protowire.AppendTag(t, tensorRawData, protowire.BytesType)
	t = protowire.AppendBytes(t, raw)
	return t
}

func encodeValueInfo(name, batch string, width int) []byte {
	var d0, d1, shape, tt, typ, v []byte
	d0 = appendString(d0, dimParam, batch)
	d1 = appendVarint(d1, dimValue, uint64(width))
	shape = appendMessage(shape, shapeDim, d0)
	shape = appendMessage(shape, shapeDim, d1)
	tt = appendVarint(tt, tensorElemType, elemFloat)
	tt = appendMessage(tt, tensorShape, shape)
	typ = appendMessage(typ, typeTensor, tt)
	v = appendString(v, valueName, name)
	v = appendMessage(v, valueType, typ)
	return v
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, field protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

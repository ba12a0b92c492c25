package infer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"
)

// ErrScalarTensor is returned for 0-d (scalar) tensors: the Go binding for
// ONNX Runtime cannot create them, so models whose inputs or outputs are 0-d
// are refused at Load, and 0-d request tensors are refused.
var ErrScalarTensor = errors.New("infer: 0-d (scalar) tensors are not supported; give the tensor at least one dimension")

// ErrUnsupportedDatatype is returned for element types the server cannot carry
// (strings, FP16, BF16, complex, float8, int4).
var ErrUnsupportedDatatype = errors.New("infer: unsupported datatype")

// Datatype names an element type as the Open Inference Protocol spells it.
type Datatype string

// The element types the server carries.
const (
	BOOL   Datatype = "BOOL"
	UINT8  Datatype = "UINT8"
	UINT16 Datatype = "UINT16"
	UINT32 Datatype = "UINT32"
	UINT64 Datatype = "UINT64"
	INT8   Datatype = "INT8"
	INT16  Datatype = "INT16"
	INT32  Datatype = "INT32"
	INT64  Datatype = "INT64"
	FP32   Datatype = "FP32"
	FP64   Datatype = "FP64"
	// BYTES is a tensor of strings; the server returns it (a classifier's
	// string labels) but takes no BYTES inputs.
	BYTES Datatype = "BYTES"
)

// Tensor is one named input or output. Data is a flat, row-major slice whose
// Go type matches Datatype: []bool, []uint8, []uint16, []uint32, []uint64,
// []int8, []int16, []int32, []int64, []float32, []float64, or []string for
// a BYTES output.
type Tensor struct {
	Name     string
	Datatype Datatype
	Shape    []int64
	Data     any
	// Classes, on an output the model gives as a sequence of maps (a
	// scikit-learn classifier's probabilities, as ZipMap writes them),
	// are the map keys in column order: the output is an FP32 tensor of
	// [rows, len(Classes)]. Nil for other tensors.
	Classes []string
}

// datatypeOf maps ONNX Runtime's element type to the protocol's name, or
// returns the ONNX name and false when the server cannot carry it.
func datatypeOf(t ort.TensorElementDataType) (Datatype, bool) {
	switch t {
	case ort.TensorElementDataTypeBool:
		return BOOL, true
	case ort.TensorElementDataTypeUint8:
		return UINT8, true
	case ort.TensorElementDataTypeUint16:
		return UINT16, true
	case ort.TensorElementDataTypeUint32:
		return UINT32, true
	case ort.TensorElementDataTypeUint64:
		return UINT64, true
	case ort.TensorElementDataTypeInt8:
		return INT8, true
	case ort.TensorElementDataTypeInt16:
		return INT16, true
	case ort.TensorElementDataTypeInt32:
		return INT32, true
	case ort.TensorElementDataTypeInt64:
		return INT64, true
	case ort.TensorElementDataTypeFloat:
		return FP32, true
	case ort.TensorElementDataTypeDouble:
		return FP64, true
	case ort.TensorElementDataTypeString:
		return "BYTES", false
	case ort.TensorElementDataTypeFloat16:
		return "FP16", false
	case ort.TensorElementDataTypeBFloat16:
		return "BF16", false
	}
	return Datatype(t.String()), false
}

// elements returns the number of elements a shape holds, or an error for a
// negative dimension or an overflow.
func elements(shape []int64) (int, error) {
	if len(shape) == 0 {
		return 0, ErrScalarTensor
	}
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is %d; dimensions must be >= 0", i, d)
		}
		if d != 0 && n > math.MaxInt32/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return int(n), nil
}

// length returns len(data) for the slice types a Tensor carries.
func length(data any) int {
	switch d := data.(type) {
	case []bool:
		return len(d)
	case []uint8:
		return len(d)
	case []uint16:
		return len(d)
	case []uint32:
		return len(d)
	case []uint64:
		return len(d)
	case []int8:
		return len(d)
	case []int16:
		return len(d)
	case []int32:
		return len(d)
	case []int64:
		return len(d)
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []string:
		return len(d)
	}
	return -1
}

// toValue wraps t's data in an ONNX Runtime tensor without copying it.
func toValue(t *Tensor) (ort.Value, error) {
	if len(t.Shape) == 0 {
		return nil, ErrScalarTensor
	}
	shape := ort.Shape(t.Shape)
	var v ort.Value
	var err error
	switch d := t.Data.(type) {
	case []bool:
		v, err = newValue(shape, d)
	case []uint8:
		v, err = newValue(shape, d)
	case []uint16:
		v, err = newValue(shape, d)
	case []uint32:
		v, err = newValue(shape, d)
	case []uint64:
		v, err = newValue(shape, d)
	case []int8:
		v, err = newValue(shape, d)
	case []int16:
		v, err = newValue(shape, d)
	case []int32:
		v, err = newValue(shape, d)
	case []int64:
		v, err = newValue(shape, d)
	case []float32:
		v, err = newValue(shape, d)
	case []float64:
		v, err = newValue(shape, d)
	default:
		return nil, fmt.Errorf("%w: Go type %T", ErrUnsupportedDatatype, t.Data)
	}
	return v, err
}

func newValue[T ort.TensorData](shape ort.Shape, data []T) (ort.Value, error) {
	if len(data) == 0 {
		// ONNX Runtime wants a pointer even for empty tensors; one spare
		// element gives it one.
		data = make([]T, 1)
	}
	t, err := ort.NewTensor(shape, data)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// fromValue copies an ONNX Runtime output into a Tensor named name.
func fromValue(name string, v ort.Value) (Tensor, error) {
	out := Tensor{Name: name, Shape: []int64(v.GetShape().Clone())}
	if len(out.Shape) == 0 {
		return out, ErrScalarTensor
	}
	switch t := v.(type) {
	case *ort.Tensor[bool]:
		out.Datatype, out.Data = BOOL, t.GetData()
	case *ort.Tensor[uint8]:
		out.Datatype, out.Data = UINT8, t.GetData()
	case *ort.Tensor[uint16]:
		out.Datatype, out.Data = UINT16, t.GetData()
	case *ort.Tensor[uint32]:
		out.Datatype, out.Data = UINT32, t.GetData()
	case *ort.Tensor[uint64]:
		out.Datatype, out.Data = UINT64, t.GetData()
	case *ort.Tensor[int8]:
		out.Datatype, out.Data = INT8, t.GetData()
	case *ort.Tensor[int16]:
		out.Datatype, out.Data = INT16, t.GetData()
	case *ort.Tensor[int32]:
		out.Datatype, out.Data = INT32, t.GetData()
	case *ort.Tensor[int64]:
		out.Datatype, out.Data = INT64, t.GetData()
	case *ort.Tensor[float32]:
		out.Datatype, out.Data = FP32, t.GetData()
	case *ort.Tensor[float64]:
		out.Datatype, out.Data = FP64, t.GetData()
	case *ort.StringTensor:
		ss, err := t.GetContents()
		if err != nil {
			return out, fmt.Errorf("output %q: %w", name, err)
		}
		out.Datatype, out.Data = BYTES, ss
	case *ort.Sequence:
		return fromSequence(name, t)
	default:
		return out, fmt.Errorf("%w: output %q has ONNX type %v", ErrUnsupportedDatatype, name, v.GetONNXType())
	}
	return out, nil
}

// fromSequence turns a sequence of maps from class to score, one map per
// row (what ZipMap makes of a classifier's probabilities), into an FP32
// tensor [rows, classes] whose columns are the first map's keys, in the
// order the map gives them.
func fromSequence(name string, seq *ort.Sequence) (Tensor, error) {
	out := Tensor{Name: name, Datatype: FP32}
	rows, _ := seq.GetValues()
	var col map[string]int
	var data []float32
	for r, v := range rows {
		m, ok := v.(*ort.Map)
		if !ok {
			return out, fmt.Errorf("%w: output %q is a sequence of %v, not of maps", ErrUnsupportedDatatype, name, v.GetONNXType())
		}
		kv, vv, _ := m.GetKeysAndValues()
		keys, err := mapKeys(kv)
		if err != nil {
			return out, fmt.Errorf("%w: output %q: %w", ErrUnsupportedDatatype, name, err)
		}
		vals, err := float32s(vv)
		if err != nil || len(vals) != len(keys) {
			return out, fmt.Errorf("%w: output %q: map values: %v", ErrUnsupportedDatatype, name, err)
		}
		if r == 0 {
			out.Classes = keys
			col = make(map[string]int, len(keys))
			for i, k := range keys {
				col[k] = i
			}
			data = make([]float32, len(rows)*len(keys))
		}
		if len(keys) != len(out.Classes) {
			return out, fmt.Errorf("%w: output %q: row %d has %d classes, row 0 has %d", ErrUnsupportedDatatype, name, r, len(keys), len(out.Classes))
		}
		for i, k := range keys {
			c, ok := col[k]
			if !ok {
				return out, fmt.Errorf("%w: output %q: row %d has class %q, row 0 does not", ErrUnsupportedDatatype, name, r, k)
			}
			data[r*len(keys)+c] = vals[i]
		}
	}
	out.Shape, out.Data = []int64{int64(len(rows)), int64(len(out.Classes))}, data
	if data == nil {
		out.Data = []float32{}
	}
	return out, nil
}

// mapKeys reads a map's keys (int64 or string) as strings.
func mapKeys(v ort.Value) ([]string, error) {
	switch k := v.(type) {
	case *ort.Tensor[int64]:
		out := make([]string, 0, len(k.GetData()))
		for _, x := range k.GetData() {
			out = append(out, strconv.FormatInt(x, 10))
		}
		return out, nil
	case *ort.StringTensor:
		return k.GetContents()
	}
	return nil, fmt.Errorf("map keys of ONNX type %v", v.GetONNXType())
}

// float32s reads a map's values as float32.
func float32s(v ort.Value) ([]float32, error) {
	switch t := v.(type) {
	case *ort.Tensor[float32]:
		return slices.Clone(t.GetData()), nil
	case *ort.Tensor[float64]:
		out := make([]float32, len(t.GetData()))
		for i, x := range t.GetData() {
			out[i] = float32(x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("map values of ONNX type %v", v.GetONNXType())
}

// parseData decodes a JSON array (flat or nested to any depth) of n elements
// of type dt. It scans the bytes directly: request bodies are mostly numbers,
// and decoding them through encoding/json's generic values costs several
// allocations per element.
func parseData(dt Datatype, raw []byte, n int) (any, error) {
	switch dt {
	case BOOL:
		return parseElems(raw, n, func(tok []byte) (bool, error) {
			switch string(tok) {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
			return false, fmt.Errorf("%q is not a BOOL (true or false)", tok)
		})
	case UINT8:
		return parseElems(raw, n, parseUint[uint8](8))
	case UINT16:
		return parseElems(raw, n, parseUint[uint16](16))
	case UINT32:
		return parseElems(raw, n, parseUint[uint32](32))
	case UINT64:
		return parseElems(raw, n, parseUint[uint64](64))
	case INT8:
		return parseElems(raw, n, parseInt[int8](8))
	case INT16:
		return parseElems(raw, n, parseInt[int16](16))
	case INT32:
		return parseElems(raw, n, parseInt[int32](32))
	case INT64:
		return parseElems(raw, n, parseInt[int64](64))
	case FP32:
		return parseElems(raw, n, func(tok []byte) (float32, error) {
			f, err := strconv.ParseFloat(bstr(tok), 32)
			return float32(f), err
		})
	case FP64:
		return parseElems(raw, n, func(tok []byte) (float64, error) {
			return strconv.ParseFloat(bstr(tok), 64)
		})
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedDatatype, dt)
}

func parseUint[T uint8 | uint16 | uint32 | uint64](bits int) func([]byte) (T, error) {
	return func(tok []byte) (T, error) {
		v, err := strconv.ParseUint(bstr(tok), 10, bits)
		return T(v), err
	}
}

func parseInt[T int8 | int16 | int32 | int64](bits int) func([]byte) (T, error) {
	return func(tok []byte) (T, error) {
		v, err := strconv.ParseInt(bstr(tok), 10, bits)
		return T(v), err
	}
}

// bstr views b as a string without copying; strconv does not keep it.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func parseElems[T any](raw []byte, n int, parse func([]byte) (T, error)) ([]T, error) {
	// Every element takes at least two bytes ("0,"), so the body bounds the
	// allocation whatever shape the request claims.
	out := make([]T, 0, min(n, len(raw)/2+1))
	depth := 0
	i := 0
	for i < len(raw) {
		c := raw[i]
		switch {
		case c == '[':
			depth++
			i++
		case c == ']':
			depth--
			if depth < 0 {
				return nil, errors.New("data: unbalanced brackets")
			}
			i++
		case c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r':
			i++
		default:
			if depth == 0 {
				return nil, errors.New("data must be a JSON array")
			}
			j := i
			for j < len(raw) && raw[j] != ',' && raw[j] != ']' && raw[j] != ' ' && raw[j] != '\n' && raw[j] != '\t' && raw[j] != '\r' {
				j++
			}
			if len(out) == n {
				return nil, fmt.Errorf("data has more than the %d elements its shape holds", n)
			}
			v, err := parse(raw[i:j])
			if err != nil {
				return nil, fmt.Errorf("data[%d]: %w", len(out), err)
			}
			out = append(out, v)
			i = j
		}
	}
	if depth != 0 {
		return nil, errors.New("data: unbalanced brackets")
	}
	if len(out) != n {
		return nil, fmt.Errorf("data has %d elements, its shape holds %d", len(out), n)
	}
	return out, nil
}

// appendData appends data as a flat JSON array. NaN and ±Inf, which JSON
// cannot carry, are written as null.
func appendData(b []byte, data any) []byte {
	b = append(b, '[')
	switch d := data.(type) {
	case []bool:
		for i, v := range d {
			b = comma(b, i)
			b = strconv.AppendBool(b, v)
		}
	case []uint8:
		b = appendUints(b, d)
	case []uint16:
		b = appendUints(b, d)
	case []uint32:
		b = appendUints(b, d)
	case []uint64:
		b = appendUints(b, d)
	case []int8:
		b = appendInts(b, d)
	case []int16:
		b = appendInts(b, d)
	case []int32:
		b = appendInts(b, d)
	case []int64:
		b = appendInts(b, d)
	case []float32:
		for i, v := range d {
			b = comma(b, i)
			b = appendFloat(b, float64(v), 32)
		}
	case []float64:
		for i, v := range d {
			b = comma(b, i)
			b = appendFloat(b, v, 64)
		}
	case []string:
		for i, v := range d {
			b = comma(b, i)
			b = appendString(b, v)
		}
	}
	return append(b, ']')
}

func comma(b []byte, i int) []byte {
	if i > 0 {
		return append(b, ',')
	}
	return b
}

func appendFloat(b []byte, v float64, bits int) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

func appendUints[T uint8 | uint16 | uint32 | uint64](b []byte, d []T) []byte {
	for i, v := range d {
		b = comma(b, i)
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	return b
}

func appendInts[T int8 | int16 | int32 | int64](b []byte, d []T) []byte {
	for i, v := range d {
		b = comma(b, i)
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return b
}

// float64s converts numeric data to float64 (BOOL as 0/1), for samples.
func float64s(data any) []float64 {
	switch d := data.(type) {
	case []bool:
		out := make([]float64, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out
	case []uint8:
		return conv(d)
	case []uint16:
		return conv(d)
	case []uint32:
		return conv(d)
	case []uint64:
		return conv(d)
	case []int8:
		return conv(d)
	case []int16:
		return conv(d)
	case []int32:
		return conv(d)
	case []int64:
		return conv(d)
	case []float32:
		return conv(d)
	case []float64:
		return append([]float64(nil), d...)
	}
	return nil
}

func conv[T uint8 | uint16 | uint32 | uint64 | int8 | int16 | int32 | int64 | float32](d []T) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v)
	}
	return out
}

package infer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// errNotTensor marks a test input that is not a TensorProto we can carry
// (strings, FP16, sequences, optionals): those cases are skipped.
var errNotTensor = errors.New("not a supported TensorProto")

// ONNX TensorProto.DataType values.
var protoTypes = map[uint64]Datatype{
	1: FP32, 2: UINT8, 3: INT8, 4: UINT16, 5: INT16, 6: INT32, 7: INT64,
	9: BOOL, 11: FP64, 12: UINT32, 13: UINT64,
}

// decodeTensorProto decodes an ONNX TensorProto (onnx.proto3: dims = 1,
// data_type = 2, float_data = 4, int32_data = 5, int64_data = 7, name = 8,
// raw_data = 9, double_data = 10, uint64_data = 11) into a Tensor.
func decodeTensorProto(b []byte) (Tensor, error) {
	var t Tensor
	var dtype uint64
	var raw []byte
	var hasRaw bool
	var floats []float32
	var doubles []float64
	var ints []int64 // int32_data and int64_data, widened
	var uints []uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return t, protowire.ParseError(n)
		}
		b = b[n:]
		// Repeated numeric fields may be packed (bytes) or not.
		packed := typ == protowire.BytesType
		var m int
		switch {
		case num == 1 || num == 5 || num == 7 || num == 11:
			each := func(v uint64) {
				switch num {
				case 1:
					t.Shape = append(t.Shape, int64(v))
				case 5:
					ints = append(ints, int64(int32(v)))
				case 7:
					ints = append(ints, int64(v))
				case 11:
					uints = append(uints, v)
				}
			}
			if packed {
				var p []byte
				p, m = protowire.ConsumeBytes(b)
				for len(p) > 0 {
					v, k := protowire.ConsumeVarint(p)
					if k < 0 {
						return t, protowire.ParseError(k)
					}
					each(v)
					p = p[k:]
				}
			} else {
				var v uint64
				v, m = protowire.ConsumeVarint(b)
				each(v)
			}
		case num == 2:
			dtype, m = protowire.ConsumeVarint(b)
		case num == 4 && packed:
			var p []byte
			p, m = protowire.ConsumeBytes(b)
			for i := 0; i+4 <= len(p); i += 4 {
				floats = append(floats, math.Float32frombits(binary.LittleEndian.Uint32(p[i:])))
			}
		case num == 4:
			var v uint32
			v, m = protowire.ConsumeFixed32(b)
			floats = append(floats, math.Float32frombits(v))
		case num == 10 && packed:
			var p []byte
			p, m = protowire.ConsumeBytes(b)
			for i := 0; i+8 <= len(p); i += 8 {
				doubles = append(doubles, math.Float64frombits(binary.LittleEndian.Uint64(p[i:])))
			}
		case num == 10:
			var v uint64
			v, m = protowire.ConsumeFixed64(b)
			doubles = append(doubles, math.Float64frombits(v))
		case num == 8:
			var s []byte
			s, m = protowire.ConsumeBytes(b)
			t.Name = string(s)
		case num == 9:
			raw, m = protowire.ConsumeBytes(b)
			hasRaw = true
		case num == 13 || num == 14:
			return t, fmt.Errorf("%w: external data", errNotTensor)
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return t, protowire.ParseError(m)
		}
		b = b[m:]
	}
	dt, ok := protoTypes[dtype]
	if !ok {
		return t, fmt.Errorf("%w: data_type %d", errNotTensor, dtype)
	}
	t.Datatype = dt
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	if hasRaw {
		t.Data = fromRaw(dt, raw)
	} else {
		t.Data = fromFields(dt, floats, doubles, ints, uints)
	}
	if got := length(t.Data); got != n {
		return t, fmt.Errorf("tensor %q: %d elements for shape %v", t.Name, got, t.Shape)
	}
	return t, nil
}

func fromRaw(dt Datatype, raw []byte) any {
	le := binary.LittleEndian
	switch dt {
	case FP32:
		return decodeRaw(raw, 4, func(p []byte) float32 { return math.Float32frombits(le.Uint32(p)) })
	case FP64:
		return decodeRaw(raw, 8, func(p []byte) float64 { return math.Float64frombits(le.Uint64(p)) })
	case UINT8:
		return decodeRaw(raw, 1, func(p []byte) uint8 { return p[0] })
	case INT8:
		return decodeRaw(raw, 1, func(p []byte) int8 { return int8(p[0]) })
	case BOOL:
		return decodeRaw(raw, 1, func(p []byte) bool { return p[0] != 0 })
	case UINT16:
		return decodeRaw(raw, 2, func(p []byte) uint16 { return le.Uint16(p) })
	case INT16:
		return decodeRaw(raw, 2, func(p []byte) int16 { return int16(le.Uint16(p)) })
	case UINT32:
		return decodeRaw(raw, 4, func(p []byte) uint32 { return le.Uint32(p) })
	case INT32:
		return decodeRaw(raw, 4, func(p []byte) int32 { return int32(le.Uint32(p)) })
	case UINT64:
		return decodeRaw(raw, 8, func(p []byte) uint64 { return le.Uint64(p) })
	case INT64:
		return decodeRaw(raw, 8, func(p []byte) int64 { return int64(le.Uint64(p)) })
	}
	return nil
}

func decodeRaw[T any](raw []byte, size int, f func([]byte) T) []T {
	out := make([]T, len(raw)/size)
	for i := range out {
		out[i] = f(raw[i*size:])
	}
	return out
}

func fromFields(dt Datatype, floats []float32, doubles []float64, ints []int64, uints []uint64) any {
	switch dt {
	case FP32:
		return append([]float32{}, floats...)
	case FP64:
		return append([]float64{}, doubles...)
	case UINT8:
		return narrow[uint8](ints)
	case INT8:
		return narrow[int8](ints)
	case UINT16:
		return narrow[uint16](ints)
	case INT16:
		return narrow[int16](ints)
	case INT32:
		return narrow[int32](ints)
	case INT64:
		return append([]int64{}, ints...)
	case BOOL:
		out := make([]bool, len(ints))
		for i, v := range ints {
			out[i] = v != 0
		}
		return out
	case UINT32:
		out := make([]uint32, len(uints))
		for i, v := range uints {
			out[i] = uint32(v)
		}
		return out
	case UINT64:
		return append([]uint64{}, uints...)
	}
	return nil
}

func narrow[T uint8 | int8 | uint16 | int16 | int32](v []int64) []T {
	out := make([]T, len(v))
	for i, x := range v {
		out[i] = T(x)
	}
	return out
}

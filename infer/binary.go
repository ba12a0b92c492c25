package infer

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The Open Inference Protocol's binary tensor data extension: a request or
// reply body is a JSON header of the length named by this HTTP header,
// followed by the raw little-endian bytes of every tensor whose parameters
// carry "binary_data_size", in the order the tensors appear in the header.
// Skipping the decimal text saves the float parsing and printing that
// dominate JSON codec time for wide tensors.
const headerLengthKey = "Inference-Header-Content-Length"

// elemSize returns the bytes per element of dt in the binary extension
// (BOOL is one byte, 0 or 1), or 0 for a type it does not carry.
func elemSize(dt Datatype) int {
	switch dt {
	case BOOL, UINT8, INT8:
		return 1
	case UINT16, INT16:
		return 2
	case UINT32, INT32, FP32:
		return 4
	case UINT64, INT64, FP64:
		return 8
	}
	return 0
}

// decodeBinary turns raw little-endian bytes into n elements of dt.
func decodeBinary(dt Datatype, raw []byte, n int) (any, error) {
	size := elemSize(dt)
	if size == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedDatatype, dt)
	}
	if len(raw) != n*size {
		return nil, fmt.Errorf("binary data is %d bytes; shape and datatype %s need %d", len(raw), dt, n*size)
	}
	le := binary.LittleEndian
	switch dt {
	case BOOL:
		d := make([]bool, n)
		for i, c := range raw {
			if c > 1 {
				return nil, fmt.Errorf("binary BOOL byte %d is %d; want 0 or 1", i, c)
			}
			d[i] = c == 1
		}
		return d, nil
	case UINT8:
		return append([]uint8(nil), raw...), nil
	case INT8:
		d := make([]int8, n)
		for i, c := range raw {
			d[i] = int8(c)
		}
		return d, nil
	case UINT16:
		return decodeEach(raw, n, 2, func(b []byte) uint16 { return le.Uint16(b) }), nil
	case INT16:
		return decodeEach(raw, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) }), nil
	case UINT32:
		return decodeEach(raw, n, 4, func(b []byte) uint32 { return le.Uint32(b) }), nil
	case INT32:
		return decodeEach(raw, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) }), nil
	case FP32:
		return decodeEach(raw, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }), nil
	case UINT64:
		return decodeEach(raw, n, 8, func(b []byte) uint64 { return le.Uint64(b) }), nil
	case INT64:
		return decodeEach(raw, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) }), nil
	case FP64:
		return decodeEach(raw, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedDatatype, dt)
}

func decodeEach[T any](raw []byte, n, size int, f func([]byte) T) []T {
	d := make([]T, n)
	for i := range d {
		d[i] = f(raw[i*size:])
	}
	return d
}

// appendBinary appends data's elements as raw little-endian bytes.
func appendBinary(b []byte, data any) []byte {
	le := binary.LittleEndian
	switch d := data.(type) {
	case []bool:
		for _, v := range d {
			c := byte(0)
			if v {
				c = 1
			}
			b = append(b, c)
		}
	case []uint8:
		b = append(b, d...)
	case []int8:
		for _, v := range d {
			b = append(b, byte(v))
		}
	case []uint16:
		for _, v := range d {
			b = le.AppendUint16(b, v)
		}
	case []int16:
		for _, v := range d {
			b = le.AppendUint16(b, uint16(v))
		}
	case []uint32:
		for _, v := range d {
			b = le.AppendUint32(b, v)
		}
	case []int32:
		for _, v := range d {
			b = le.AppendUint32(b, uint32(v))
		}
	case []float32:
		for _, v := range d {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
	case []uint64:
		for _, v := range d {
			b = le.AppendUint64(b, v)
		}
	case []int64:
		for _, v := range d {
			b = le.AppendUint64(b, uint64(v))
		}
	case []float64:
		for _, v := range d {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
	case []string:
		// As the protocol's binary extension writes BYTES: each element's
		// length (4 bytes, little-endian), then its bytes.
		for _, v := range d {
			b = le.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

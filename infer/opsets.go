package infer

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
)

// Opsets reads the operator sets an ONNX model imports (its ModelProto's
// opset_import), by domain; the default domain is "ai.onnx".
func Opsets(model []byte) (map[string]int64, error) {
	out := map[string]int64{}
	b := model
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errors.New("infer: not an ONNX model: bad protobuf tag")
		}
		b = b[n:]
		if num == 8 && typ == protowire.BytesType { // ModelProto.opset_import
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, errors.New("infer: not an ONNX model: bad opset_import")
			}
			domain, version, err := opsetID(v)
			if err != nil {
				return nil, err
			}
			out[domain] = version
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, errors.New("infer: not an ONNX model: bad protobuf field")
		}
		b = b[n:]
	}
	if len(out) == 0 {
		return nil, errors.New("infer: not an ONNX model: it imports no operator set")
	}
	return out, nil
}

func opsetID(b []byte) (domain string, version int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", 0, errors.New("infer: bad operator set id")
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, n := protowire.ConsumeString(b)
			if n < 0 {
				return "", 0, errors.New("infer: bad operator set domain")
			}
			domain, b = s, b[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return "", 0, errors.New("infer: bad operator set version")
			}
			version, b = int64(v), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", 0, errors.New("infer: bad operator set id")
			}
			b = b[n:]
		}
	}
	if domain == "" {
		domain = "ai.onnx"
	}
	return domain, version, nil
}

// FormatOpsets writes opsets as "ai.onnx=13,ai.onnx.ml=1", sorted.
func FormatOpsets(opsets map[string]int64) string {
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(opsets)) {
		parts = append(parts, d+"="+strconv.FormatInt(opsets[d], 10))
	}
	return strings.Join(parts, ",")
}

// ErrUnsupportedOperator is wrapped by a load error whose cause is an
// operator ONNX Runtime has no implementation of.
var ErrUnsupportedOperator = errors.New("infer: unsupported operator")

var (
	// "Fatal error: com.example:Foo(-1) is not a registered function/op"
	notRegisteredRE = regexp.MustCompile(`([A-Za-z0-9_.]*):([A-Za-z0-9_]+)\(-?\d+\) is not a registered function/op`)
	// "Could not find an implementation for Foo(13) node with name '...'"
	noImplRE = regexp.MustCompile(`Could not find an implementation for ([A-Za-z0-9_]+)\((\d+)\)`)
	// `In Node, ("", Gelu, "", -1) : ... Error No Op registered for Gelu with domain_version of 13`
	noOpRE = regexp.MustCompile(`In Node, \("[^"]*", ([A-Za-z0-9_]+), "([^"]*)"[^)]*\).*No Op registered for [A-Za-z0-9_]+ with domain_version of (\d+)`)
)

// explainLoad says which operator and operator set ONNX Runtime could not
// load, when its error is about one: "unsupported operator Gelu (opset
// ai.onnx 13)". Other errors are returned as they are.
func explainLoad(err error, model []byte) error {
	msg := err.Error()
	op, domain, opset := "", "", ""
	if m := notRegisteredRE.FindStringSubmatch(msg); m != nil {
		op, domain = m[2], m[1]
	} else if m := noOpRE.FindStringSubmatch(msg); m != nil {
		op, domain, opset = m[1], m[2], m[3]
	} else if m := noImplRE.FindStringSubmatch(msg); m != nil {
		op, opset = m[1], m[2] // the domain is not in the message
	} else {
		return err
	}
	if domain == "" {
		domain = "ai.onnx"
	}
	if opset == "" {
		if sets, err := Opsets(model); err == nil {
			if v, ok := sets[domain]; ok {
				opset = strconv.FormatInt(v, 10)
			}
		}
	}
	if opset == "" {
		opset = "?"
	}
	return fmt.Errorf("%w %s (opset %s %s): ONNX Runtime %s has no implementation of it", ErrUnsupportedOperator, op, domain, opset, RuntimeVersion())
}

// ModelDesc is what a pushed model says of itself, read from its bytes
// without ONNX Runtime.
type ModelDesc struct {
	// Opsets are the operator sets it imports, by domain.
	Opsets map[string]int64
	// Producer is the tool that wrote it ("skl2onnx 1.17", "pytorch 2.1").
	Producer string
	// Inputs and Outputs are its graph's, as "name FP32[?,3]" (a
	// sequence of maps reads "name seq(map(INT64,FP32))").
	Inputs, Outputs []string
}

// Describe reads an ONNX model's operator sets, producer, inputs and
// outputs; an error says the bytes are not an ONNX model.
func Describe(model []byte) (ModelDesc, error) {
	d := ModelDesc{}
	sets, err := Opsets(model)
	if err != nil {
		return d, err
	}
	d.Opsets = sets
	var name, ver string
	var graph []byte
	err = fields(model, func(num protowire.Number, v []byte) {
		switch num {
		case 2:
			name = string(v)
		case 3:
			ver = string(v)
		case 7:
			graph = v
		}
	})
	if err != nil || graph == nil {
		return d, errors.New("infer: not an ONNX model: no graph")
	}
	d.Producer = strings.TrimSpace(name + " " + ver)
	err = fields(graph, func(num protowire.Number, v []byte) {
		switch num {
		case 11:
			d.Inputs = append(d.Inputs, valueInfo(v))
		case 12:
			d.Outputs = append(d.Outputs, valueInfo(v))
		}
	})
	if err != nil || len(d.Outputs) == 0 {
		return d, errors.New("infer: not an ONNX model: its graph has no outputs")
	}
	return d, nil
}

// fields calls fn with each length-delimited field of a protobuf message.
func fields(b []byte, fn func(num protowire.Number, v []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("bad protobuf tag")
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errors.New("bad protobuf field")
			}
			fn(num, v)
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return errors.New("bad protobuf field")
		}
		b = b[n:]
	}
	return nil
}

// valueInfo writes a ValueInfoProto as "name TYPE".
func valueInfo(b []byte) string {
	var name, typ string
	_ = fields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			name = string(v)
		case 2:
			typ = typeString(v)
		}
	})
	return strings.TrimSpace(name + " " + typ)
}

// typeString writes a TypeProto: "FP32[?,3]", "seq(map(INT64,FP32))".
func typeString(b []byte) string {
	out := "?"
	_ = fields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 1: // tensor_type
			elem, shape := int64(0), ""
			for len(v) > 0 {
				n2, t2, n := protowire.ConsumeTag(v)
				if n < 0 {
					return
				}
				v = v[n:]
				switch {
				case n2 == 1 && t2 == protowire.VarintType:
					x, n := protowire.ConsumeVarint(v)
					if n < 0 {
						return
					}
					elem, v = int64(x), v[n:]
				case n2 == 2 && t2 == protowire.BytesType:
					s, n := protowire.ConsumeBytes(v)
					if n < 0 {
						return
					}
					shape, v = shapeString(s), v[n:]
				default:
					if n = protowire.ConsumeFieldValue(n2, t2, v); n < 0 {
						return
					}
					v = v[n:]
				}
			}
			dt, _ := datatypeOf(ort.TensorElementDataType(elem))
			out = string(dt) + shape
		case 4: // sequence_type { elem_type = 1 }
			inner := "?"
			_ = fields(v, func(num protowire.Number, e []byte) {
				if num == 1 {
					inner = typeString(e)
				}
			})
			out = "seq(" + inner + ")"
		case 5: // map_type { key_type = 1 (varint), value_type = 2 }
			key, val := "?", "?"
			if n2, t2, n := protowire.ConsumeTag(v); n > 0 && n2 == 1 && t2 == protowire.VarintType {
				if x, m := protowire.ConsumeVarint(v[n:]); m > 0 {
					dt, _ := datatypeOf(ort.TensorElementDataType(x))
					key = string(dt)
				}
			}
			_ = fields(v, func(num protowire.Number, e []byte) {
				if num == 2 {
					val = strings.TrimSuffix(typeString(e), "[]")
				}
			})
			out = "map(" + key + "," + val + ")"
		}
	})
	return out
}

// shapeString writes a TensorShapeProto: "[?,3]"; "" when it has none.
func shapeString(b []byte) string {
	var dims []string
	_ = fields(b, func(num protowire.Number, d []byte) {
		if num != 1 {
			return
		}
		dim := "?"
		for len(d) > 0 {
			n2, t2, n := protowire.ConsumeTag(d)
			if n < 0 {
				break
			}
			d = d[n:]
			if n2 == 1 && t2 == protowire.VarintType {
				x, m := protowire.ConsumeVarint(d)
				if m < 0 {
					break
				}
				dim, d = strconv.FormatInt(int64(x), 10), d[m:]
				continue
			}
			if n = protowire.ConsumeFieldValue(n2, t2, d); n < 0 {
				break
			}
			d = d[n:]
		}
		dims = append(dims, dim)
	})
	return "[" + strings.Join(dims, ",") + "]"
}

package onnx_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/trainer/onnx"
	"google.golang.org/protobuf/encoding/protowire"
)

var update = flag.Bool("update", false, "rewrite golden files")

// field describes one field of the onnx.proto subset the encoder writes:
// its name and, for nested messages, the message's schema name.
type field struct {
	name string
	msg  string // "" for scalars and strings
	kind string // "varint", "string", "floats" (raw little-endian), "packed"
}

// schema maps message → field number → field, after onnx/onnx.proto. It is
// written from the proto file independently of the encoder's constants, so
// a wrong field number in the encoder shows up as an unknown field here.
var schema = map[string]map[protowire.Number]field{
	"ModelProto": {
		1: {name: "ir_version", kind: "varint"}, 2: {name: "producer_name", kind: "string"},
		3: {name: "producer_version", kind: "string"}, 5: {name: "model_version", kind: "varint"},
		6: {name: "doc_string", kind: "string"}, 7: {name: "graph", msg: "GraphProto"},
		8: {name: "opset_import", msg: "OperatorSetIdProto"}, 14: {name: "metadata_props", msg: "StringStringEntryProto"},
	},
	"OperatorSetIdProto":     {1: {name: "domain", kind: "string"}, 2: {name: "version", kind: "varint"}},
	"StringStringEntryProto": {1: {name: "key", kind: "string"}, 2: {name: "value", kind: "string"}},
	"GraphProto": {
		1: {name: "node", msg: "NodeProto"}, 2: {name: "name", kind: "string"},
		5: {name: "initializer", msg: "TensorProto"}, 11: {name: "input", msg: "ValueInfoProto"},
		12: {name: "output", msg: "ValueInfoProto"},
	},
	"NodeProto": {
		1: {name: "input", kind: "string"}, 2: {name: "output", kind: "string"}, 3: {name: "name", kind: "string"},
		4: {name: "op_type", kind: "string"}, 5: {name: "attribute", msg: "AttributeProto"},
	},
	"AttributeProto": {1: {name: "name", kind: "string"}, 3: {name: "i", kind: "varint"}, 20: {name: "type", kind: "varint"}},
	"TensorProto": {
		1: {name: "dims", kind: "packed"}, 2: {name: "data_type", kind: "varint"},
		8: {name: "name", kind: "string"}, 9: {name: "raw_data", kind: "floats"},
	},
	"ValueInfoProto":             {1: {name: "name", kind: "string"}, 2: {name: "type", msg: "TypeProto"}},
	"TypeProto":                  {1: {name: "tensor_type", msg: "TypeProto.Tensor"}},
	"TypeProto.Tensor":           {1: {name: "elem_type", kind: "varint"}, 2: {name: "shape", msg: "TensorShapeProto"}},
	"TensorShapeProto":           {1: {name: "dim", msg: "TensorShapeProto.Dimension"}},
	"TensorShapeProto.Dimension": {1: {name: "dim_value", kind: "varint"}, 2: {name: "dim_param", kind: "string"}},
}

// render prints b, a message of type msg, as indented text.
func render(tb testing.TB, sb *strings.Builder, msg string, b []byte, depth int) {
	tb.Helper()
	ind := strings.Repeat("  ", depth)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			tb.Fatalf("%s: bad tag", msg)
		}
		b = b[n:]
		f, ok := schema[msg][num]
		if !ok {
			tb.Fatalf("%s: unknown field %d", msg, num)
		}
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			b = b[n:]
			fmt.Fprintf(sb, "%s%s: %d\n", ind, f.name, int64(v))
		case typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				tb.Fatalf("%s.%s: bad length", msg, f.name)
			}
			b = b[n:]
			switch {
			case f.msg != "":
				fmt.Fprintf(sb, "%s%s {\n", ind, f.name)
				render(tb, sb, f.msg, v, depth+1)
				fmt.Fprintf(sb, "%s}\n", ind)
			case f.kind == "string":
				fmt.Fprintf(sb, "%s%s: %q\n", ind, f.name, v)
			case f.kind == "packed":
				var dims []int64
				for len(v) > 0 {
					d, n := protowire.ConsumeVarint(v)
					v = v[n:]
					dims = append(dims, int64(d))
				}
				fmt.Fprintf(sb, "%s%s: %v\n", ind, f.name, dims)
			case f.kind == "floats":
				var fs []float32
				for i := 0; i+4 <= len(v); i += 4 {
					fs = append(fs, math.Float32frombits(binary.LittleEndian.Uint32(v[i:])))
				}
				fmt.Fprintf(sb, "%s%s: %v\n", ind, f.name, fs)
			default:
				tb.Fatalf("%s.%s: unexpected bytes", msg, f.name)
			}
		default:
			tb.Fatalf("%s.%s: unexpected wire type %d", msg, f.name, typ)
		}
	}
}

func TestGolden(t *testing.T) {
	lr, err := onnx.LogisticRegression([]float32{1, -2.5}, 0.5, onnx.Options{Metadata: map[string]string{"strata.kind": "logistic"}})
	if err != nil {
		t.Fatal(err)
	}
	mlp, err := onnx.MLP([]onnx.Layer{
		{In: 2, Out: 2, Weights: []float32{1, 2, 3, 4}, Bias: []float32{0.5, -0.5}, Activation: onnx.Relu},
		{In: 2, Out: 3, Weights: []float32{1, 0, -1, 0, 1, 2}, Bias: []float32{0, 0, 1}, Activation: onnx.Softmax},
	}, onnx.Options{OutputName: "probabilities", ModelVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	for name, model := range map[string][]byte{"logistic": lr, "mlp-softmax": mlp} {
		t.Run(name, func(t *testing.T) {
			var sb strings.Builder
			render(t, &sb, "ModelProto", model, 0)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if diff := cmp.Diff(string(want), sb.String()); diff != "" {
				t.Fatalf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}

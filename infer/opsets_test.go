package infer

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestOpsets(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		"testdata/sklearn_like_int.onnx": "ai.onnx=13,ai.onnx.ml=1",
		"testdata/unsupported_op.onnx":   "ai.onnx=13,com.example.custom=1",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sets, err := Opsets(b)
		if err != nil || FormatOpsets(sets) != want {
			t.Errorf("%s: opsets %q, %v; want %q", file, FormatOpsets(sets), err, want)
		}
	}
	for _, bad := range [][]byte{nil, []byte("not a model"), {0x42, 0xff}} {
		if _, err := Opsets(bad); err == nil {
			t.Errorf("Opsets(%q) = nil error", bad)
		}
	}
}

// TestCheckNamesTheOperator: a model ONNX Runtime cannot run is refused
// with the operator and its operator set, not ONNX Runtime's whole text.
func TestCheckNamesTheOperator(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, Config{})
	for file, want := range map[string]string{
		"testdata/unsupported_op.onnx": "unsupported operator Foo (opset com.example.custom 1)",
		"testdata/gelu13.onnx":         "unsupported operator Gelu (opset ai.onnx 13)",
	} {
		b, _ := os.ReadFile(file)
		err := s.Check("m", "1", b)
		if !errors.Is(err, ErrUnsupportedOperator) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Check = %v; want ErrUnsupportedOperator with %q", file, err, want)
		}
	}
	b, _ := os.ReadFile("testdata/sklearn_like_str.onnx")
	if err := s.Check("m", "1", b); err != nil {
		t.Errorf("a model it can run: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	b, _ := os.ReadFile("testdata/sklearn_like_str.onnx")
	d, err := Describe(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Producer != "skl2onnx-like" || !slices.Equal(d.Inputs, []string{"float_input FP32[?,3]"}) ||
		!slices.Equal(d.Outputs, []string{"output_label BYTES[?]", "output_probability seq(map(BYTES,FP32))"}) {
		t.Errorf("Describe = %+v", d)
	}
	if _, err := Describe([]byte("-----BEGIN CERTIFICATE-----\nMIIB")); err == nil {
		t.Error("a PEM certificate was described as a model")
	}
	if _, err := Describe(nil); err == nil {
		t.Error("an empty file was described as a model")
	}
}

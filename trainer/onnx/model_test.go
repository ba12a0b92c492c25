package onnx_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-mesh/strata/trainer/internal/orttest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

func randomRows(seed uint64, n, f int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*f)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func assertClose(tb testing.TB, want, got []float32, tol float64) {
	tb.Helper()
	if len(want) != len(got) {
		tb.Fatalf("len: want %d, got %d", len(want), len(got))
	}
	for i := range want {
		d := math.Abs(float64(want[i]) - float64(got[i]))
		if d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			tb.Fatalf("value %d: want %g, got %g (|diff| %g > tol %g)", i, want[i], got[i], d, tol)
		}
	}
}

func TestOnnxRuntimeMatchesPredict(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
		last  onnx.Activation
		opts  onnx.Options
	}{
		{name: "logistic", sizes: []int{5, 1}, last: onnx.Sigmoid},
		{name: "mlp-identity", sizes: []int{8, 16, 3}, last: onnx.Identity},
		{name: "mlp-softmax", sizes: []int{4, 32, 32, 6}, last: onnx.Softmax},
		{name: "mlp-sigmoid-tanh", sizes: []int{3, 7, 1}, last: onnx.Sigmoid},
		{name: "bench-shape", sizes: []int{64, 256, 256, 16}, last: onnx.Identity},
		{name: "renamed", sizes: []int{2, 2}, last: onnx.Softmax, opts: onnx.Options{InputName: "x", OutputName: "probabilities", BatchDim: "batch", Metadata: map[string]string{"strata.version": "7", "a": "b"}, Opset: 17}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layers, err := onnx.RandomLayers(int64(i+1), tc.sizes...)
			if err != nil {
				t.Fatal(err)
			}
			layers[len(layers)-1].Activation = tc.last
			if tc.name == "mlp-sigmoid-tanh" {
				layers[0].Activation = onnx.Tanh
			}
			model, err := onnx.MLP(layers, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			const n = 37
			f, out := tc.sizes[0], tc.sizes[len(tc.sizes)-1]
			x := randomRows(uint64(i), n, f)
			want := onnx.Predict(layers, x, n)
			opts := tc.opts
			opts.EnsureDefaults()
			got := orttest.Run(t, model, opts.InputName, opts.OutputName, x, n, f, out)
			assertClose(t, want, got, 1e-4)
		})
	}
}

func TestLogisticRegression(t *testing.T) {
	w := []float32{1, -2, 0.5}
	model, err := onnx.LogisticRegression(w, 0.25, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 1, 1, 0, 0, 0, 2, -1, 4}
	want := make([]float32, 3)
	for r := 0; r < 3; r++ {
		z := 0.25
		for j := range w {
			z += float64(w[j] * x[r*3+j])
		}
		want[r] = float32(1 / (1 + math.Exp(-z)))
	}
	got := orttest.Run(t, model, "input", "output", x, 3, 3, 1)
	assertClose(t, want, got, 1e-5)
}

func TestDeterministic(t *testing.T) {
	a, _, err := onnx.RandomMLP(9, 3, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := onnx.RandomMLP(9, 3, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("same seed and sizes gave different bytes")
	}
	c, _, _ := onnx.RandomMLP(10, 3, 4, 2)
	if string(a) == string(c) {
		t.Fatal("different seeds gave the same bytes")
	}
}

func TestInvalid(t *testing.T) {
	good := onnx.Layer{In: 2, Out: 1, Weights: []float32{1, 2}, Bias: []float32{0}}
	tests := []struct {
		name   string
		layers []onnx.Layer
		opts   onnx.Options
	}{
		{name: "none"},
		{name: "short-weights", layers: []onnx.Layer{{In: 2, Out: 2, Weights: []float32{1}, Bias: []float32{0, 0}}}},
		{name: "bias", layers: []onnx.Layer{{In: 2, Out: 1, Weights: []float32{1, 2}}}},
		{name: "chain", layers: []onnx.Layer{good, good}},
		{name: "activation", layers: []onnx.Layer{{In: 2, Out: 1, Weights: []float32{1, 2}, Bias: []float32{0}, Activation: "gelu"}}},
		{name: "nan", layers: []onnx.Layer{{In: 2, Out: 1, Weights: []float32{float32(math.NaN()), 2}, Bias: []float32{0}}}},
		{name: "zero", layers: []onnx.Layer{{In: 0, Out: 1}}},
		{name: "opset", layers: []onnx.Layer{good}, opts: onnx.Options{Opset: 11}},
		{name: "names", layers: []onnx.Layer{good}, opts: onnx.Options{InputName: "x", OutputName: "x"}},
		{name: "default-clash", layers: []onnx.Layer{good}, opts: onnx.Options{InputName: "output"}},
		{name: "reserved", layers: []onnx.Layer{good}, opts: onnx.Options{OutputName: "layer0.weight"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := onnx.MLP(tc.layers, tc.opts)
			if !errors.Is(err, onnx.ErrInvalidModel) {
				t.Fatalf("want ErrInvalidModel, got %v", err)
			}
		})
	}
	if _, _, err := onnx.RandomMLP(1, 4); !errors.Is(err, onnx.ErrInvalidModel) {
		t.Fatalf("one size: want ErrInvalidModel, got %v", err)
	}
}

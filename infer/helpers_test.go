package infer

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// libPath finds the ONNX Runtime library: $STRATA_ORT_LIB, else where
// `make setup-ort` installs it.
func libPath() string {
	if p := os.Getenv(EnvLibraryPath); p != "" {
		return p
	}
	p, _ := filepath.Abs(filepath.Join("..", ".deps", "onnxruntime", "libonnxruntime.so.1"))
	return p
}

// needRuntime skips tb when the ONNX Runtime library is not installed.
func needRuntime(tb testing.TB) string {
	tb.Helper()
	p := libPath()
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("ONNX Runtime library not found (%v): run `make setup-ort` or set %s", err, EnvLibraryPath)
	}
	if err := InitRuntime(p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// newServer returns a Server closed at the end of the test, with its metrics
// on a private registry.
func newServer(tb testing.TB, cfg Config) (*Server, *prometheus.Registry) {
	tb.Helper()
	cfg.LibraryPath = needRuntime(tb)
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "test-node"
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, reg
}

// mlp is a seeded random MLP and its layers, for reference outputs.
type mlp struct {
	model  []byte
	layers []onnx.Layer
}

func newMLP(tb testing.TB, seed int64, sizes ...int) mlp {
	tb.Helper()
	model, layers, err := onnx.RandomMLP(seed, sizes...)
	if err != nil {
		tb.Fatal(err)
	}
	return mlp{model, layers}
}

func (m mlp) predict(x []float32, n int) []float32 { return onnx.Predict(m.layers, x, n) }

func load(tb testing.TB, s *Server, name, ver string, model []byte) {
	tb.Helper()
	if err := s.Load(context.Background(), name, ver, model); err != nil {
		tb.Fatal(err)
	}
}

// rows returns n seeded rows of f features.
func rows(seed, n, f int) []float32 {
	x := make([]float32, n*f)
	for i := range x {
		// A cheap deterministic spread over [-1, 1].
		x[i] = float32((i*7919+seed*104729)%2001-1000) / 1000
	}
	return x
}

func assertClose(tb testing.TB, want, got []float32, tol float64) {
	tb.Helper()
	if len(want) != len(got) {
		tb.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		d := float64(want[i] - got[i])
		if d < -tol || d > tol {
			tb.Fatalf("value %d: got %v, want %v (tolerance %v)", i, got[i], want[i], tol)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

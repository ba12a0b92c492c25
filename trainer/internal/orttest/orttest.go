// Package orttest loads models into ONNX Runtime for the trainer's tests.
// The runtime library is found through STRATA_ORT_LIB or, failing that, at
// .deps/onnxruntime/libonnxruntime.so.1 under the module root (where
// scripts/install-ort.sh puts it); without either, tests that need it skip.
package orttest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

var (
	once    sync.Once
	initErr error
	libPath string
)

// LibPath returns the ONNX Runtime shared library path, or "" when none is
// configured or installed (a configured path that does not exist counts as
// none).
func LibPath() string {
	if p := os.Getenv("STRATA_ORT_LIB"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, ".deps", "onnxruntime", "libonnxruntime.so.1")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Init initialises the process-global ONNX Runtime environment once, skipping
// tb when no library is available and failing it when initialisation fails.
func Init(tb testing.TB) {
	tb.Helper()
	once.Do(func() {
		libPath = LibPath()
		if libPath == "" {
			return
		}
		ort.SetSharedLibraryPath(libPath)
		initErr = ort.InitializeEnvironment()
	})
	if libPath == "" {
		tb.Skip("ONNX Runtime not available: set STRATA_ORT_LIB or run scripts/install-ort.sh")
	}
	if initErr != nil {
		tb.Fatalf("initialise ONNX Runtime from %s: %v", libPath, initErr)
	}
}

// Run loads model into a fresh session, feeds n rows of features columns from
// x to the input named in, and returns the output named out, which must have
// outWidth columns.
func Run(tb testing.TB, model []byte, in, out string, x []float32, n, features, outWidth int) []float32 {
	tb.Helper()
	Init(tb)
	input, err := ort.NewTensor(ort.NewShape(int64(n), int64(features)), x)
	if err != nil {
		tb.Fatalf("input tensor: %v", err)
	}
	defer input.Destroy()
	output, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(n), int64(outWidth)))
	if err != nil {
		tb.Fatalf("output tensor: %v", err)
	}
	defer output.Destroy()
	s, err := ort.NewAdvancedSessionWithONNXData(model, []string{in}, []string{out}, []ort.Value{input}, []ort.Value{output}, nil)
	if err != nil {
		tb.Fatalf("load model into ONNX Runtime: %v", err)
	}
	defer s.Destroy()
	if err := s.Run(); err != nil {
		tb.Fatalf("run model: %v", err)
	}
	return append([]float32(nil), output.GetData()...)
}

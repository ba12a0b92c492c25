package infer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInferMatchesReference(t *testing.T) {
	s, _ := newServer(t, Config{DisableBatching: true})
	m := newMLP(t, 7, 8, 16, 3)
	load(t, s, "m", "1", m.model)
	for _, n := range []int{1, 5} {
		x := rows(n, n, 8)
		resp, err := s.Infer(context.Background(), &Request{Model: "m", ID: "r", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{int64(n), 8}, Data: x}}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int64{int64(n), 3}, resp.Outputs[0].Shape); diff != "" {
			t.Fatalf("output shape (-want +got):\n%s", diff)
		}
		assertClose(t, m.predict(x, n), resp.Outputs[0].Data.([]float32), 1e-4)
		if resp.Version != "1" || resp.ID != "r" {
			t.Fatalf("response version %q id %q, want 1 and r", resp.Version, resp.ID)
		}
	}
}

func TestModels(t *testing.T) {
	s, _ := newServer(t, Config{})
	load(t, s, "b", "2", newMLP(t, 1, 4, 2).model)
	load(t, s, "a", "1", newMLP(t, 1, 3, 1).model)
	want := []ModelInfo{
		{Name: "a", Version: "1", Batching: true,
			Inputs:  []TensorInfo{{Name: "input", Datatype: FP32, Shape: []int64{-1, 3}}},
			Outputs: []TensorInfo{{Name: "output", Datatype: FP32, Shape: []int64{-1, 1}}}},
		{Name: "b", Version: "2", Batching: true,
			Inputs:  []TensorInfo{{Name: "input", Datatype: FP32, Shape: []int64{-1, 4}}},
			Outputs: []TensorInfo{{Name: "output", Datatype: FP32, Shape: []int64{-1, 2}}}},
	}
	if diff := cmp.Diff(want, s.Models()); diff != "" {
		t.Fatalf("Models (-want +got):\n%s", diff)
	}
	if err := s.Unload("a", "9"); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("Unload of a version not served: got %v, want ErrModelNotFound", err)
	}
	if err := s.Unload("a", ""); err != nil {
		t.Fatal(err)
	}
	if got := len(s.Models()); got != 1 {
		t.Fatalf("after Unload, %d models, want 1", got)
	}
	if _, err := s.Infer(context.Background(), &Request{Model: "a"}); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("Infer on an unloaded model: got %v, want ErrModelNotFound", err)
	}
}

func TestInferErrors(t *testing.T) {
	s, _ := newServer(t, Config{})
	load(t, s, "m", "1", newMLP(t, 1, 4, 2).model)
	f := func(shape []int64, data any) []Tensor {
		return []Tensor{{Name: "input", Datatype: FP32, Shape: shape, Data: data}}
	}
	tests := []struct {
		name   string
		req    Request
		target error
		msg    string
	}{
		{"unknown model", Request{Model: "nope"}, ErrModelNotFound, "not served"},
		{"unknown version", Request{Model: "m", Version: "2", Inputs: f([]int64{1, 4}, make([]float32, 4))}, ErrModelNotFound, `version "2"`},
		{"missing input", Request{Model: "m"}, ErrBadInput, `input "input" is missing`},
		{"unknown input", Request{Model: "m", Inputs: []Tensor{{Name: "x", Datatype: FP32, Shape: []int64{1, 4}, Data: make([]float32, 4)}}}, ErrBadInput, `no input "x"`},
		{"wrong datatype", Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP64, Shape: []int64{1, 4}, Data: make([]float64, 4)}}}, ErrBadInput, "wants FP32"},
		{"wrong width", Request{Model: "m", Inputs: f([]int64{1, 5}, make([]float32, 5))}, ErrBadInput, "wants [-1 4]"},
		{"wrong rank", Request{Model: "m", Inputs: f([]int64{4}, make([]float32, 4))}, ErrBadInput, "wants [-1 4]"},
		{"scalar", Request{Model: "m", Inputs: f([]int64{}, make([]float32, 1))}, ErrScalarTensor, "0-d"},
		{"short data", Request{Model: "m", Inputs: f([]int64{2, 4}, make([]float32, 4))}, ErrBadInput, "holds 8"},
		{"unknown output", Request{Model: "m", Inputs: f([]int64{1, 4}, make([]float32, 4)), Outputs: []string{"y"}}, ErrBadInput, `no output "y"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Infer(context.Background(), &tt.req)
			if !errors.Is(err, tt.target) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want an error wrapping %v containing %q", err, tt.target, tt.msg)
			}
		})
	}
}

func TestMissingRuntimeSaysHowToInstall(t *testing.T) {
	err := missingRuntime("/nowhere/libonnxruntime.so.1", errors.New("no such file"))
	for _, want := range []string{"make setup-ort", EnvLibraryPath, "CUDA", "/nowhere/libonnxruntime.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, ErrRuntimeUnavailable) {
		t.Errorf("error %v does not wrap ErrRuntimeUnavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{MaxBatch: -1, SampleFraction: 2, BatchWindow: -1}
	err := c.Validate()
	for _, want := range []string{"MaxBatch", "SampleFraction", "BatchWindow"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}

func TestInitRuntimeTwice(t *testing.T) {
	p := needRuntime(t)
	if err := InitRuntime(p); err != nil {
		t.Fatalf("second InitRuntime with the same library: %v", err)
	}
	rel, err := filepath.Rel(".", p)
	if err == nil {
		if err := InitRuntime(rel); err != nil {
			t.Fatalf("InitRuntime with a relative spelling of the same library: %v", err)
		}
	}
	if err := InitRuntime(os.Args[0]); !errors.Is(err, ErrRuntimeUnavailable) {
		t.Fatalf("InitRuntime with another file after initialisation: got %v, want ErrRuntimeUnavailable", err)
	}
	if RuntimeVersion() == "" {
		t.Fatal("RuntimeVersion is empty after initialisation")
	}
}

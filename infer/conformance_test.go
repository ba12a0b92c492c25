package infer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// onnxTestData is where Debian's libonnx-testdata puts ONNX's backend test
// cases (scripts/install-debs.sh installs it).
const onnxTestData = "/usr/share/libonnx-testdata/data"

// Skip reasons in the conformance tally.
const (
	skipScalar      = "0-d tensor"
	skipDatatype    = "unsupported dtype"
	skipNonTensor   = "non-tensor input or output (sequence, map, optional)"
	skipMissingOp   = "operator missing in this build"
	skipInvalidData = "test data not a plain TensorProto"
	skipNoInputs    = "model without inputs"
)

type outcome struct {
	status string // pass, fail, skip
	reason string
}

// TestConformance runs ONNX's node and simple backend test cases through
// Load and Infer, then again through the Open Inference Protocol handler
// (binary tensor extension), and compares outputs with the expected ones (relative 1e-3, absolute 1e-5; integers and
// booleans exactly). It logs counts by outcome and reason.
func TestConformance(t *testing.T) {
	if _, err := os.Stat(onnxTestData); err != nil {
		t.Skipf("ONNX backend test data not installed (%v): run `make setup-debs` (Debian package libonnx-testdata)", err)
	}
	s, _ := newServer(t, Config{IntraOpThreads: 1})
	var dirs []string
	for _, suite := range []string{"node", "simple"} {
		m, _ := filepath.Glob(filepath.Join(onnxTestData, suite, "*", "model.onnx"))
		for _, p := range m {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	if len(dirs) == 0 {
		t.Skip("no test cases under " + onnxTestData)
	}
	sort.Strings(dirs)
	counts := map[string]int{}
	var fails []string
	for _, dir := range dirs {
		name := filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir)
		o := runCase(s, name, dir)
		key := o.status
		if o.status == "skip" {
			key += ": " + o.reason
		}
		counts[key]++
		if o.status == "fail" {
			if why, ok := knownFailures[name]; ok {
				counts["fail"]--
				counts["known failure"]++
				t.Logf("known failure: %s: %s (%s)", name, o.reason, why)
			} else {
				fails = append(fails, name+": "+o.reason)
			}
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if counts[k] == 0 {
			continue
		}
		t.Logf("%5d  %s", counts[k], k)
	}
	for _, f := range fails {
		t.Errorf("fail: %s", f)
	}
	skipped := len(dirs) - counts["pass"] - counts["fail"] - counts["known failure"]
	t.Logf("conformance: %d cases: %d pass, %d fail (%d known), %d skip",
		len(dirs), counts["pass"], counts["fail"]+counts["known failure"], counts["known failure"], skipped)
	// The Debian package ships 955 node and simple cases; 698 pass with ORT
	// 1.24.1. Far fewer means the harness, not the runtime, broke.
	if counts["pass"] < 600 {
		t.Errorf("only %d cases pass; expected about 700", counts["pass"])
	}
}

func runCase(s *Server, name, dir string) outcome {
	model, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return outcome{"fail", err.Error()}
	}
	if err := s.Load(context.Background(), name, "1", model); err != nil {
		return classify(err, "load")
	}
	defer s.Unload(name, "")
	info, err := s.Model(name, "")
	if err != nil {
		return outcome{"fail", err.Error()}
	}
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if len(sets) == 0 {
		return outcome{"skip", skipInvalidData}
	}
	for _, set := range sets {
		inputs, err := readTensors(set, "input", len(info.Inputs))
		if err != nil {
			return classify(err, "input")
		}
		for i := range inputs {
			inputs[i].Name = info.Inputs[i].Name
		}
		want, err := readTensors(set, "output", len(info.Outputs))
		if err != nil {
			return classify(err, "output")
		}
		resp, err := s.Infer(context.Background(), &Request{Model: name, Inputs: inputs})
		if err != nil {
			return classify(err, "infer")
		}
		for i, w := range want {
			if err := compare(w, resp.Outputs[i]); err != nil {
				return outcome{"fail", fmt.Sprintf("%s output %d: %v", filepath.Base(set), i, err)}
			}
		}
		// The same case over the Open Inference Protocol handler, with the
		// binary extension so every datatype travels bit-exact.
		got, err := inferOverHTTP(s.Handler(), name, inputs)
		if err != nil {
			return outcome{"fail", fmt.Sprintf("%s over HTTP: %v", filepath.Base(set), err)}
		}
		for i, w := range want {
			if err := compare(w, got[i]); err != nil {
				return outcome{"fail", fmt.Sprintf("%s output %d over HTTP: %v", filepath.Base(set), i, err)}
			}
		}
	}
	return outcome{"pass", ""}
}

// inferOverHTTP posts inputs to h's infer endpoint for model in the binary
// tensor data extension, asks for binary outputs, and decodes the reply.
func inferOverHTTP(h http.Handler, model string, inputs []Tensor) ([]Tensor, error) {
	type param struct {
		BinaryDataSize int `json:"binary_data_size"`
	}
	type tensorHeader struct {
		Name       string   `json:"name"`
		Datatype   Datatype `json:"datatype"`
		Shape      []int64  `json:"shape"`
		Parameters param    `json:"parameters"`
	}
	var req struct {
		Inputs     []tensorHeader `json:"inputs"`
		Parameters struct {
			BinaryDataOutput bool `json:"binary_data_output"`
		} `json:"parameters"`
	}
	req.Parameters.BinaryDataOutput = true
	var payload []byte
	for _, in := range inputs {
		n := len(payload)
		payload = appendBinary(payload, in.Data)
		req.Inputs = append(req.Inputs, tensorHeader{in.Name, in.Datatype, in.Shape, param{len(payload) - n}})
	}
	header, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r := httptest.NewRequest("POST", "/v2/models/"+url.PathEscape(model)+"/infer", bytes.NewReader(append(header, payload...)))
	r.Header.Set(headerLengthKey, strconv.Itoa(len(header)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", rec.Code, body)
	}
	hl, err := strconv.Atoi(rec.Header().Get(headerLengthKey))
	if err != nil || hl > len(body) {
		return nil, fmt.Errorf("reply %s %q for a %d-byte body", headerLengthKey, rec.Header().Get(headerLengthKey), len(body))
	}
	var resp struct {
		Outputs []tensorHeader `json:"outputs"`
	}
	if err := json.Unmarshal(body[:hl], &resp); err != nil {
		return nil, fmt.Errorf("reply header: %w", err)
	}
	rest := body[hl:]
	out := make([]Tensor, len(resp.Outputs))
	for i, o := range resp.Outputs {
		size := o.Parameters.BinaryDataSize
		if size > len(rest) {
			return nil, fmt.Errorf("output %q: binary_data_size %d, %d bytes left", o.Name, size, len(rest))
		}
		n, err := elements(o.Shape)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		data, err := decodeBinary(o.Datatype, rest[:size], n)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		rest = rest[size:]
		out[i] = Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Data: data}
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("%d reply bytes past the last output", len(rest))
	}
	return out, nil
}

func readTensors(dir, kind string, n int) ([]Tensor, error) {
	files, _ := filepath.Glob(filepath.Join(dir, kind+"_*.pb"))
	if len(files) != n {
		return nil, fmt.Errorf("%w: %d %s files for %d model %ss (optional or omitted inputs)", errNotTensor, len(files), kind, n, kind)
	}
	sort.Slice(files, func(i, j int) bool { return pbIndex(files[i]) < pbIndex(files[j]) })
	out := make([]Tensor, n)
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if out[i], err = decodeTensorProto(b); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		if len(out[i].Shape) == 0 {
			return nil, ErrScalarTensor
		}
	}
	return out, nil
}

func pbIndex(path string) int {
	b := strings.TrimSuffix(filepath.Base(path), ".pb")
	n, _ := strconv.Atoi(b[strings.LastIndexByte(b, '_')+1:])
	return n
}

func classify(err error, stage string) outcome {
	msg := err.Error()
	switch {
	case errors.Is(err, ErrUnsupportedModel):
		return outcome{"skip", skipNoInputs}
	case errors.Is(err, ErrScalarTensor):
		return outcome{"skip", skipScalar}
	case errors.Is(err, ErrUnsupportedDatatype) && strings.Contains(msg, "not a tensor"):
		return outcome{"skip", skipNonTensor}
	case errors.Is(err, ErrUnsupportedDatatype):
		return outcome{"skip", skipDatatype}
	case errors.Is(err, errNotTensor) && strings.Contains(msg, "data_type"):
		return outcome{"skip", skipDatatype}
	case errors.Is(err, errNotTensor):
		return outcome{"skip", skipInvalidData}
	case errors.Is(err, ErrUnsupportedOperator) || strings.Contains(msg, "Could not find an implementation") || strings.Contains(msg, "is not a registered function/op") || strings.Contains(msg, "NOT_IMPLEMENTED"):
		return outcome{"skip", skipMissingOp}
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return outcome{"fail", stage + ": " + msg}
}

func compare(want, got Tensor) error {
	if want.Datatype != got.Datatype {
		return fmt.Errorf("datatype %s, want %s", got.Datatype, want.Datatype)
	}
	if fmt.Sprint(want.Shape) != fmt.Sprint(got.Shape) {
		return fmt.Errorf("shape %v, want %v", got.Shape, want.Shape)
	}
	switch w := want.Data.(type) {
	case []float32:
		return closeFloats(float64s(w), float64s(got.Data))
	case []float64:
		return closeFloats(w, got.Data.([]float64))
	}
	if fmt.Sprint(want.Data) != fmt.Sprint(got.Data) {
		return fmt.Errorf("data differs")
	}
	return nil
}

func closeFloats(want, got []float64) error {
	for i := range want {
		w, g := want[i], got[i]
		if math.IsNaN(w) && math.IsNaN(g) || w == g {
			continue
		}
		if math.Abs(w-g) > 1e-5+1e-3*math.Abs(w) {
			return fmt.Errorf("element %d is %v, want %v", i, g, w)
		}
	}
	return nil
}

// knownFailures are cases this ONNX Runtime build (1.24.1, CPU) gets wrong
// or refuses against ONNX 1.12's expected outputs, reviewed one by one. Any
// other failure fails the test.
var knownFailures = map[string]string{
	"node/test_bernoulli":                                             "random sampling: ORT's generator differs from numpy's",
	"node/test_bernoulli_double":                                      "random sampling: ORT's generator differs from numpy's",
	"node/test_bernoulli_double_expanded":                             "random sampling: ORT's generator differs from numpy's",
	"node/test_bernoulli_expanded":                                    "random sampling: ORT's generator differs from numpy's",
	"node/test_bernoulli_seed":                                        "random sampling: ORT's generator differs from numpy's",
	"node/test_bernoulli_seed_expanded":                               "random sampling: ORT's generator differs from numpy's",
	"node/test_dft":                                                   "float32 DFT error near zero (~1e-4) exceeds the absolute tolerance",
	"node/test_dft_axis":                                              "float32 DFT error near zero (~1e-5) exceeds the absolute tolerance",
	"node/test_dft_inverse":                                           "float32 DFT error near zero (~1e-5) exceeds the absolute tolerance",
	"node/test_gru_batchwise":                                         "ORT's CPU GRU does not support layout=1",
	"node/test_lstm_batchwise":                                        "ORT's CPU LSTM does not support layout=1",
	"node/test_simple_rnn_batchwise":                                  "ORT's CPU RNN does not support layout=1",
	"node/test_maxunpool_export_with_output_shape":                    "ORT places unpooled values differently when output_shape is given",
	"node/test_resize_downsample_scales_cubic_align_corners":          "ORT's align_corners downsampling differs from the reference",
	"node/test_resize_downsample_scales_linear_align_corners":         "ORT's align_corners downsampling differs from the reference",
	"node/test_strnormalizer_export_monday_insensintive_upper_twodim": "needs the en_US.UTF-8 locale, absent on minimal hosts",
	"simple/test_strnorm_model_monday_empty_output":                   "needs the en_US.UTF-8 locale, absent on minimal hosts",
	"simple/test_strnorm_model_monday_insensintive_upper_twodim":      "needs the en_US.UTF-8 locale, absent on minimal hosts",
}

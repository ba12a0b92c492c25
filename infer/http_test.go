package infer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func do(tb testing.TB, h http.Handler, method, path, body string) (int, map[string]any, http.Header) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		tb.Fatalf("%s %s: response is not JSON: %v: %q", method, path, err, rec.Body.String())
	}
	return rec.Code, out, rec.Header()
}

func TestHTTP(t *testing.T) {
	s, reg := newServer(t, Config{NodeName: "edge-7", MaxRequestBytes: 4096})
	m := newMLP(t, 3, 2, 4, 2)
	load(t, s, "m", "5", m.model)
	h := s.Handler()

	x := []float32{0.5, -1, 2, 0.25}
	want := m.predict(x, 2)
	wantData := []any{float64(want[0]), float64(want[1]), float64(want[2]), float64(want[3])}
	okBody := `{"id":"q1","inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","data":[0.5,-1,2,0.25]}]}`
	nested := `{"inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","data":[[0.5,-1],[2,0.25]]}]}`

	tests := []struct {
		name, method, path, body string
		code                     int
		check                    func(t *testing.T, got map[string]any)
	}{
		{"live", "GET", "/v2/health/live", "", 200, nil},
		{"ready", "GET", "/v2/health/ready", "", 200, nil},
		{"server metadata", "GET", "/v2", "", 200, func(t *testing.T, got map[string]any) {
			if got["name"] != "strata" {
				t.Errorf("name = %v", got["name"])
			}
			if diff := cmp.Diff([]any{"binary_tensor_data"}, got["extensions"]); diff != "" {
				t.Errorf("extensions (-want +got):\n%s", diff)
			}
		}},
		{"model metadata", "GET", "/v2/models/m", "", 200, func(t *testing.T, got map[string]any) {
			want := map[string]any{
				"name": "m", "versions": []any{"5"}, "platform": "onnxruntime",
				"inputs":  []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []any{-1.0, 2.0}}},
				"outputs": []any{map[string]any{"name": "output", "datatype": "FP32", "shape": []any{-1.0, 2.0}}},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
		}},
		{"version metadata", "GET", "/v2/models/m/versions/5", "", 200, nil},
		{"model ready", "GET", "/v2/models/m/ready", "", 200, nil},
		{"version ready", "GET", "/v2/models/m/versions/5/ready", "", 200, nil},
		{"other version", "GET", "/v2/models/m/versions/4/ready", "", 404, nil},
		{"unknown model", "GET", "/v2/models/zz", "", 404, nil},
		{"infer", "POST", "/v2/models/m/infer", okBody, 200, func(t *testing.T, got map[string]any) {
			want := map[string]any{
				"model_name": "m", "model_version": "5", "id": "q1",
				"outputs": []any{map[string]any{"name": "output", "datatype": "FP32", "shape": []any{2.0, 2.0}, "data": wantData}},
			}
			if diff := cmp.Diff(want, got, cmpFloat32); diff != "" {
				t.Errorf("infer (-want +got):\n%s", diff)
			}
		}},
		{"infer nested data", "POST", "/v2/models/m/versions/5/infer", nested, 200, func(t *testing.T, got map[string]any) {
			out := got["outputs"].([]any)[0].(map[string]any)
			if diff := cmp.Diff(wantData, out["data"], cmpFloat32); diff != "" {
				t.Errorf("data (-want +got):\n%s", diff)
			}
		}},
		{"wrong datatype", "POST", "/v2/models/m/infer", strings.Replace(okBody, "FP32", "INT32", 1), 400, nil},
		{"unknown datatype", "POST", "/v2/models/m/infer", strings.Replace(okBody, "FP32", "FP8", 1), 400, nil},
		{"wrong shape", "POST", "/v2/models/m/infer", strings.Replace(okBody, "[2,2]", "[1,4]", 1), 400, nil},
		{"data short", "POST", "/v2/models/m/infer", strings.Replace(okBody, "[2,2]", "[3,2]", 1), 400, nil},
		{"scalar", "POST", "/v2/models/m/infer", strings.Replace(okBody, "[2,2]", "[]", 1), 400, nil},
		{"not a number", "POST", "/v2/models/m/infer", strings.Replace(okBody, "0.25", `"a"`, 1), 400, nil},
		{"unbalanced", "POST", "/v2/models/m/infer", strings.Replace(okBody, "[0.5", "[[0.5", 1), 400, nil},
		{"bad json", "POST", "/v2/models/m/infer", "{", 400, nil},
		{"huge shape, tiny data", "POST", "/v2/models/m/infer", strings.Replace(okBody, "[2,2]", "[1073741823,2]", 1), 400, nil},
		{"infer unknown model", "POST", "/v2/models/zz/infer", okBody, 404, nil},
		{"too large", "POST", "/v2/models/m/infer", `{"inputs":[{"name":"input","shape":[1,2],"datatype":"FP32","data":[1,2]}],"pad":"` + strings.Repeat("x", 5000) + `"}`, 413, nil},
		{"no such endpoint", "GET", "/v2/nothing", "", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, got, hdr := do(t, h, tt.method, tt.path, tt.body)
			if code != tt.code {
				t.Fatalf("status %d, want %d (body %v)", code, tt.code, got)
			}
			if hdr.Get(HeaderServedBy) != "edge-7" {
				t.Errorf("%s = %q, want edge-7", HeaderServedBy, hdr.Get(HeaderServedBy))
			}
			if code >= 400 {
				if msg, _ := got["error"].(string); msg == "" {
					t.Errorf("error response without an error message: %v", got)
				}
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
	metrics := gather(t, reg)
	wantMetrics := map[string]float64{
		`strata_infer_requests_total{code="200",model="m",version="5"}`: 2,
		`strata_infer_requests_total{code="400",model="m",version="5"}`: 9,
		`strata_infer_requests_total{code="413",model="",version=""}`:   1,
		`strata_infer_requests_total{code="404",model="",version=""}`:   1,
		`strata_infer_rejected_total{reason="too_large"}`:               1,
		`strata_infer_request_duration_seconds{model="m",version="5"}`:  11,
		`strata_infer_batch_rows{model="m",version="5"}`:                2,
	}
	if diff := cmp.Diff(wantMetrics, metrics); diff != "" {
		t.Errorf("metrics on the configured registry (-want +got):\n%s", diff)
	}
}

// cmpFloat32 compares JSON numbers at float32 precision.
var cmpFloat32 = cmp.Comparer(func(a, b float64) bool {
	d := float32(a) - float32(b)
	return d < 1e-5 && d > -1e-5
})

type fakeForwarder struct{ err error }

func (f fakeForwarder) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	if f.err != nil {
		return f.err
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"forwarded":%q,"version":%q,"bytes":%d}`, model, version, len(body))
	return nil
}

func TestForwarding(t *testing.T) {
	tests := []struct {
		name string
		fwd  Forwarder
		code int
		want map[string]any
	}{
		{"no forwarder", nil, 404, nil},
		{"forwarded", fakeForwarder{}, 200, map[string]any{"forwarded": "far", "version": "3", "bytes": 2.0}},
		{"no replica", fakeForwarder{err: fmt.Errorf("mesh: %w", ErrModelNotFound)}, 404, nil},
		{"unreachable", fakeForwarder{err: context.DeadlineExceeded}, 502, nil},
		{"loading or failed elsewhere", fakeForwarder{err: fmt.Errorf("%w: far@3 is loading on edge-1", ErrModelNotReady)}, 503, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newServer(t, Config{Forwarder: tt.fwd})
			code, got, _ := do(t, s.Handler(), "POST", "/v2/models/far/versions/3/infer", "{}")
			if code != tt.code {
				t.Fatalf("status %d, want %d: %v", code, tt.code, got)
			}
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Fatalf("forwarded response (-want +got):\n%s", diff)
				}
			}
		})
	}
}

type panicForwarder struct{}

func (panicForwarder) Forward(http.ResponseWriter, *http.Request, string, string) error {
	panic("boom")
}

func TestPanicRecovered(t *testing.T) {
	s, _ := newServer(t, Config{Forwarder: panicForwarder{}})
	code, got, _ := do(t, s.Handler(), "GET", "/v2/models/x", "")
	if code != 500 || !strings.Contains(fmt.Sprint(got["error"]), "boom") {
		t.Fatalf("got %d %v, want 500 naming the panic", code, got)
	}
}

func TestSamples(t *testing.T) {
	s, _ := newServer(t, Config{SampleFraction: 1, SampleCapacity: 3, DisableBatching: true})
	m := newMLP(t, 1, 2, 1)
	load(t, s, "m", "1", m.model)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for i := 0; i < 5; i++ {
		if _, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{1, 2}, Data: x[2*i : 2*i+2]}}}); err != nil {
			t.Fatal(err)
		}
	}
	got := s.Samples("m")
	var ins [][]float64
	for _, r := range got {
		ins = append(ins, r.Inputs)
		want := m.predict([]float32{float32(r.Inputs[0]), float32(r.Inputs[1])}, 1)
		assertClose(t, want, []float32{float32(r.Outputs[0])}, 1e-5)
	}
	if diff := cmp.Diff([][]float64{{5, 6}, {7, 8}, {9, 10}}, ins); diff != "" {
		t.Fatalf("sampled inputs, oldest first (-want +got):\n%s", diff)
	}
	if s.Samples("other") != nil {
		t.Fatal("samples for a model never loaded")
	}
}

func TestSampleFraction(t *testing.T) {
	s, _ := newServer(t, Config{SampleFraction: 0.25, SampleCapacity: 1000, Seed: 42, DisableBatching: true})
	load(t, s, "m", "1", newMLP(t, 1, 2, 1).model)
	for i := 0; i < 400; i++ {
		if _, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{1, 2}, Data: []float32{1, 2}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Binomial(400, 0.25): mean 100, sd 8.7; the seed makes this exact, the
	// bounds say what it means.
	if n := len(s.Samples("m")); n < 60 || n > 140 {
		t.Fatalf("%d of 400 requests sampled at fraction 0.25", n)
	}
}

// gather returns every series in reg: counters and gauges by value,
// histograms by sample count.
func gather(tb testing.TB, reg *prometheus.Registry) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func TestObserverAndStats(t *testing.T) {
	var mu sync.Mutex
	var seen [][]float64
	s, _ := newServer(t, Config{SampleFraction: 1, DisableBatching: true, Observer: func(model string, rows []Sample) {
		mu.Lock()
		defer mu.Unlock()
		if model != "m" {
			t.Errorf("observer got model %q", model)
		}
		for _, r := range rows {
			seen = append(seen, r.Inputs)
		}
	}})
	load(t, s, "m", "1", newMLP(t, 1, 2, 1).model)
	body := `{"inputs":[{"name":"input","datatype":"FP32","shape":[2,2],"data":[1,2,3,4]}]}`
	for range 3 {
		if code, got, _ := do(t, s.Handler(), "POST", "/v2/models/m/infer", body); code != 200 {
			t.Fatalf("infer = %d %v", code, got)
		}
	}
	// A malformed request is the client's fault, not the version's.
	if code, _, _ := do(t, s.Handler(), "POST", "/v2/models/m/infer", `{"inputs":[`); code != 400 {
		t.Fatalf("bad request = %d", code)
	}
	mu.Lock()
	got := len(seen)
	first := seen[0]
	mu.Unlock()
	if got != 6 || !slices.Equal(first, []float64{1, 2}) {
		t.Errorf("observer saw %d rows (first %v), want 6 rows of 2 requests' inputs", got, first)
	}
	if st := s.Stats("m", "1"); st != (Stats{Served: 4, Failed: 0}) {
		t.Errorf("stats = %+v, want 4 served, 0 failed", st)
	}
	if st := s.Stats("m", "2"); st != (Stats{}) {
		t.Errorf("stats of a version never served = %+v", st)
	}
}

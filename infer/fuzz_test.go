package infer

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzTensorData: JSON tensor data and binary tensor bytes of any shape
// and datatype decode or fail, never panic.
func FuzzTensorData(f *testing.F) {
	for _, seed := range []struct {
		dt    string
		raw   string
		shape int64
	}{
		{"FP32", "[1,2,3,4]", 4}, {"INT64", "[[1,2],[3,4]]", 4}, {"BOOL", "[true,false]", 2},
		{"BYTES", `["a","b"]`, 2}, {"FP16", "[1e5]", 1}, {"UINT8", "[256]", 1}, {"FP32", "[", 1}, {"FP64", "null", 0},
	} {
		f.Add(seed.dt, []byte(seed.raw), seed.shape)
	}
	f.Fuzz(func(t *testing.T, dt string, raw []byte, n int64) {
		if n < 0 || n > 1<<16 {
			return
		}
		_, _ = parseData(Datatype(dt), raw, int(n))
		_, _ = decodeBinary(Datatype(dt), raw, int(n))
		_, _ = elements([]int64{n, n})
	})
}

// FuzzInferHTTP drives arbitrary OIP requests (JSON, and the binary
// extension's header length) through the real handler and a loaded model:
// every answer is a status with a JSON body, never a panic.
func FuzzInferHTTP(f *testing.F) {
	f.Add([]byte(`{"id":"q","inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","data":[[0.5,0.25],[1,2]]}]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"input","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}],"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`+"\x00\x00\x80\x3f\x00\x00\x00\x40"), "130")
	f.Add([]byte(`{"inputs":[{"name":"input","shape":[1073741823,2],"datatype":"FP32","data":[]}]}`), "")
	f.Add([]byte(`{"inputs":[]}`), "-1")
	s, _ := newServer(f, Config{NodeName: "edge-7", MaxRequestBytes: 1 << 16})
	m := newMLP(f, 3, 2, 4, 2)
	load(f, s, "m", "5", m.model)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", bytes.NewReader(body))
		if headerLen != "" {
			req.Header.Set(headerLengthKey, headerLen)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d with a body that is not JSON: %q", rec.Code, rec.Body.Bytes())
		}
	})
}

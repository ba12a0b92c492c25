package infer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/strata-mesh/strata/trainer/onnx"
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

// FuzzDescribe: the ONNX reader that checks a pushed model (its operator
// sets, producer, inputs and outputs) reads any bytes or fails, never
// panics; and every model the trainer's ONNX writer makes, of any layer
// sizes, reads back with its input and output.
func FuzzDescribe(f *testing.F) {
	m := newMLP(f, 1, 3, 4, 2)
	f.Add(m.model, uint8(0), uint8(0))
	f.Add(m.model[:len(m.model)/2], uint8(0), uint8(0))
	f.Add([]byte{0x3a, 0x02, 0x62, 0x00}, uint8(0), uint8(0)) // a graph with an empty output
	f.Add([]byte{}, uint8(3), uint8(5))
	f.Fuzz(func(t *testing.T, model []byte, in, out uint8) {
		_, _ = Opsets(model)
		_, _ = Describe(model)
		// The writer: sizes 1..16 in and out, one hidden layer.
		sizes := []int{1 + int(in%16), 1 + int((in/16)%16), 1 + int(out%16)}
		b, _, err := onnx.RandomMLP(int64(in)<<8|int64(out), sizes...)
		if err != nil {
			t.Fatalf("RandomMLP%v: %v", sizes, err)
		}
		d, err := Describe(b)
		wantIn, wantOut := fmt.Sprintf("input FP32[?,%d]", sizes[0]), fmt.Sprintf("output FP32[?,%d]", sizes[2])
		if err != nil || len(d.Inputs) != 1 || d.Inputs[0] != wantIn || len(d.Outputs) != 1 || d.Outputs[0] != wantOut || d.Opsets["ai.onnx"] == 0 {
			t.Fatalf("the writer's model for sizes %v reads back as %+v, %v; want %s and %s", sizes, d, err, wantIn, wantOut)
		}
	})
}

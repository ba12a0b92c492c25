package infer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBinaryRoundTrip(t *testing.T) {
	tests := []struct {
		dt   Datatype
		data any
	}{
		{BOOL, []bool{true, false, true}},
		{UINT8, []uint8{0, 7, 255}},
		{INT8, []int8{-128, 0, 127}},
		{UINT16, []uint16{0, 513, 65535}},
		{INT16, []int16{-32768, -1, 32767}},
		{UINT32, []uint32{0, 1 << 31, math.MaxUint32}},
		{INT32, []int32{math.MinInt32, -2, math.MaxInt32}},
		{UINT64, []uint64{0, 1 << 63, math.MaxUint64}},
		{INT64, []int64{math.MinInt64, -3, math.MaxInt64}},
		{FP32, []float32{-1.5, 0, float32(math.Inf(1))}},
		{FP64, []float64{-1e300, 0.1, 2}},
	}
	for _, tt := range tests {
		t.Run(string(tt.dt), func(t *testing.T) {
			raw := appendBinary(nil, tt.data)
			if want := 3 * elemSize(tt.dt); len(raw) != want {
				t.Fatalf("encoded %d bytes, want %d", len(raw), want)
			}
			got, err := decodeBinary(tt.dt, raw, 3)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.data, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if _, err := decodeBinary(tt.dt, raw[:len(raw)-1], 3); err == nil {
				t.Error("a short buffer decoded without error")
			}
		})
	}
	// Little-endian on the wire, whatever the host.
	if got := appendBinary(nil, []int32{0x01020304}); !bytes.Equal(got, []byte{4, 3, 2, 1}) {
		t.Errorf("INT32 0x01020304 encoded as %v, want [4 3 2 1]", got)
	}
	if _, err := decodeBinary(BOOL, []byte{2}, 1); err == nil {
		t.Error("BOOL byte 2 decoded without error")
	}
}

// binaryBody returns an infer body in the binary extension: header's JSON
// followed by payload, and the header length.
func binaryBody(header string, payload ...[]byte) (string, string) {
	b := []byte(header)
	for _, p := range payload {
		b = append(b, p...)
	}
	return string(b), strconv.Itoa(len(header))
}

func f32bytes(d []float32) []byte { return appendBinary(nil, d) }

func TestHTTPBinary(t *testing.T) {
	s, _ := newServer(t, Config{NodeName: "edge-7"})
	m := newMLP(t, 3, 2, 4, 2)
	load(t, s, "m", "5", m.model)
	h := s.Handler()

	x := []float32{0.5, -1, 2, 0.25}
	want := m.predict(x, 2)
	binIn := `{"inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	binInOut := `{"inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}],"parameters":{"binary_data_output":true}}`
	jsonInBinOut := `{"inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","data":[0.5,-1,2,0.25]}],"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`
	optOut := `{"inputs":[{"name":"input","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"output","parameters":{"binary_data":false}}],"parameters":{"binary_data_output":true}}`

	type body struct{ text, hlen string }
	mk := func(header string, payload ...[]byte) body {
		t, n := binaryBody(header, payload...)
		return body{t, n}
	}
	tests := []struct {
		name       string
		body       body
		code       int
		binaryResp bool
	}{
		{"binary in, json out", mk(binIn, f32bytes(x)), 200, false},
		{"binary in, binary out", mk(binInOut, f32bytes(x)), 200, true},
		{"json in, binary out by output", mk(jsonInBinOut), 200, true},
		{"output opts out of binary", mk(optOut, f32bytes(x)), 200, false},
		{"binary size does not fit shape", mk(strings.Replace(binIn, ":16", ":12", 1), f32bytes(x[:3])), 400, false},
		{"binary size past the body", mk(binIn, f32bytes(x[:3])), 400, false},
		{"bytes left over", mk(binIn, f32bytes(x), []byte{1, 2}), 400, false},
		{"header length past the body", body{binIn, "9999"}, 400, false},
		{"header length not a number", body{binIn, "x"}, 400, false},
		{"binary input without the header", body{binIn, ""}, 400, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v2/models/m/infer", strings.NewReader(tt.body.text))
			if tt.body.hlen != "" {
				req.Header.Set(headerLengthKey, tt.body.hlen)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, tt.code, rec.Body.String())
			}
			raw := rec.Body.Bytes()
			header, rest := raw, []byte(nil)
			hl := rec.Header().Get(headerLengthKey)
			if tt.binaryResp != (hl != "") {
				t.Fatalf("%s = %q; binary reply wanted: %v", headerLengthKey, hl, tt.binaryResp)
			}
			if hl != "" {
				n, err := strconv.Atoi(hl)
				if err != nil || n > len(raw) {
					t.Fatalf("%s = %q for a %d-byte body", headerLengthKey, hl, len(raw))
				}
				header, rest = raw[:n], raw[n:]
			}
			var got struct {
				Error   string `json:"error"`
				Outputs []struct {
					Name       string    `json:"name"`
					Shape      []int64   `json:"shape"`
					Data       []float32 `json:"data"`
					Parameters struct {
						BinaryDataSize int `json:"binary_data_size"`
					} `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(header, &got); err != nil {
				t.Fatalf("reply header is not JSON: %v: %q", err, header)
			}
			if tt.code != 200 {
				if got.Error == "" {
					t.Errorf("error reply without a message: %q", header)
				}
				return
			}
			if len(got.Outputs) != 1 {
				t.Fatalf("%d outputs, want 1", len(got.Outputs))
			}
			o := got.Outputs[0]
			data := o.Data
			if tt.binaryResp {
				if o.Data != nil {
					t.Errorf("binary output also carries JSON data %v", o.Data)
				}
				if o.Parameters.BinaryDataSize != len(rest) || len(rest) != 4*len(want) {
					t.Fatalf("binary_data_size %d, %d bytes follow; want %d", o.Parameters.BinaryDataSize, len(rest), 4*len(want))
				}
				data = make([]float32, len(want))
				for i := range data {
					data[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
				}
			}
			if diff := cmp.Diff([]int64{2, 2}, o.Shape); diff != "" {
				t.Errorf("shape (-want +got):\n%s", diff)
			}
			assertClose(t, want, data, 1e-5)
		})
	}
}

package infer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/trainer"
)

// The classifier in testdata/make_sklearn_like.py: 3 classes × 3 features.
var (
	sklCoef      = []float64{1.0, -0.5, 0.25, -1.0, 0.5, 0.75, 0.2, 0.1, -0.6}
	sklIntercept = []float64{0.1, -0.2, 0.05}
)

// sklPredict is the classifier by hand: softmax of x·Wᵀ + b, and argmax.
func sklPredict(x []float32) (probs []float64, label int) {
	scores := make([]float64, 3)
	for c := range 3 {
		scores[c] = sklIntercept[c]
		for f := range 3 {
			scores[c] += sklCoef[c*3+f] * float64(x[f])
		}
	}
	m := slices.Max(scores)
	sum := 0.0
	for c := range scores {
		scores[c] = math.Exp(scores[c] - m)
		sum += scores[c]
	}
	for c := range scores {
		scores[c] /= sum
	}
	return scores, slices.Index(scores, slices.Max(scores))
}

// TestScikitLearnStyleClassifier: a classifier exported as skl2onnx
// exports one (a label tensor, and probabilities as a sequence of maps
// from ZipMap) serves through OIP: labels as INT64 or BYTES, the
// probabilities as FP32 [rows, classes] with the classes in the output's
// parameters, in JSON and in the binary extension.
func TestScikitLearnStyleClassifier(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, Config{})
	names := []string{"setosa", "versicolor", "virginica"}
	for _, c := range []struct {
		file    string
		label   Datatype
		classes []string
	}{
		{"testdata/sklearn_like_int.onnx", INT64, []string{"0", "1", "2"}},
		{"testdata/sklearn_like_str.onnx", BYTES, names},
	} {
		t.Run(c.file, func(t *testing.T) {
			model, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(strings.TrimPrefix(c.file, "testdata/"), ".onnx")
			load(t, s, name, "1", model)
			x := rows(11, 4, 3)
			data, _ := json.Marshal(x)
			body := `{"inputs":[{"name":"float_input","shape":[4,3],"datatype":"FP32","data":` + string(data) + `}]}`
			code, got, _ := raw(s.Handler(), "/v2/models/"+name+"/infer", body)
			if code != 200 {
				t.Fatalf("infer = %d %s", code, got)
			}
			var resp struct {
				Outputs []struct {
					Name       string          `json:"name"`
					Datatype   Datatype        `json:"datatype"`
					Shape      []int64         `json:"shape"`
					Data       json.RawMessage `json:"data"`
					Parameters struct {
						Classes []string `json:"classes"`
					} `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal([]byte(got), &resp); err != nil || len(resp.Outputs) != 2 {
				t.Fatalf("response %s: %v", got, err)
			}
			lab, prob := resp.Outputs[0], resp.Outputs[1]
			if lab.Name != "output_label" || lab.Datatype != c.label || !slices.Equal(lab.Shape, []int64{4}) {
				t.Errorf("label output %s %s %v", lab.Name, lab.Datatype, lab.Shape)
			}
			if prob.Name != "output_probability" || prob.Datatype != FP32 || !slices.Equal(prob.Shape, []int64{4, 3}) || !slices.Equal(prob.Parameters.Classes, c.classes) {
				t.Errorf("probability output %s %s %v classes %v", prob.Name, prob.Datatype, prob.Shape, prob.Parameters.Classes)
			}
			var labels []any
			var probs []float64
			if json.Unmarshal(lab.Data, &labels) != nil || json.Unmarshal(prob.Data, &probs) != nil || len(labels) != 4 || len(probs) != 12 {
				t.Fatalf("data %s %s", lab.Data, prob.Data)
			}
			for r := range 4 {
				want, wl := sklPredict(x[r*3 : r*3+3])
				for k := range 3 {
					if math.Abs(probs[r*3+k]-want[k]) > 1e-5 {
						t.Errorf("row %d class %s: P = %v, want %v", r, c.classes[k], probs[r*3+k], want[k])
					}
				}
				if got := labelString(labels[r]); got != c.classes[wl] {
					t.Errorf("row %d: label %v, want %s", r, labels[r], c.classes[wl])
				}
			}
			// The binary extension: the same, with BYTES as length-prefixed
			// strings.
			code, bin, hdr := raw(s.Handler(), "/v2/models/"+name+"/infer",
				`{"inputs":[{"name":"float_input","shape":[4,3],"datatype":"FP32","data":`+string(data)+`}],"parameters":{"binary_data_output":true}}`)
			if code != 200 || hdr.Get(headerLengthKey) == "" {
				t.Fatalf("binary infer = %d %s", code, bin)
			}
			n, _ := strconv.Atoi(hdr.Get(headerLengthKey))
			if !strings.Contains(bin[:n], `"classes":`) {
				t.Errorf("binary header lacks the classes: %s", bin[:n])
			}
			if c.label == BYTES {
				b := []byte(bin[n:])
				l := binary.LittleEndian.Uint32(b)
				_, wl := sklPredict(x[:3])
				if got := string(b[4 : 4+l]); got != names[wl] {
					t.Errorf("binary first label %q, want %q", got, names[wl])
				}
			}
		})
	}
}

// raw posts body and returns the response as it came.
func raw(h http.Handler, path, body string) (int, string, http.Header) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
	return rec.Code, rec.Body.String(), rec.Header()
}

func labelString(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.Itoa(int(x))
	case string:
		return x
	}
	return ""
}

// TestBuiltinClassNames: a model the built-in trainer made from named
// classes says which class each output column is.
func TestBuiltinClassNames(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, Config{})
	for _, c := range []struct {
		csv  string
		want []string
	}{
		{"x,kind\n0.1,ham\n2.0,spam\n0.2,ham\n2.1,spam\n", []string{"spam"}}, // [N, 1]: P(spam)
		{"x,kind\n0,a\n5,b\n10,c\n0.5,a\n5.5,b\n10.5,c\n", []string{"a", "b", "c"}},
	} {
		ds, err := trainer.ReadCSV(strings.NewReader(c.csv), "kind")
		if err != nil {
			t.Fatal(err)
		}
		res, err := trainer.Train(context.Background(), ds, trainer.Config{Epochs: 2, Holdout: -1})
		if err != nil {
			t.Fatal(err)
		}
		name := "named-" + strconv.Itoa(len(c.want))
		load(t, s, name, "1", res.Model)
		code, got, _ := raw(s.Handler(), "/v2/models/"+name+"/infer", `{"inputs":[{"name":"input","shape":[1,1],"datatype":"FP32","data":[1]}]}`)
		var resp struct {
			Outputs []struct {
				Parameters struct {
					Classes []string `json:"classes"`
				} `json:"parameters"`
			} `json:"outputs"`
		}
		if code != 200 || json.Unmarshal([]byte(got), &resp) != nil || len(resp.Outputs) != 1 || !slices.Equal(resp.Outputs[0].Parameters.Classes, c.want) {
			t.Errorf("infer = %d %s; want classes %v", code, got, c.want)
		}
	}
}

// TestSampleFloor: under the floor rate every request is sampled, above
// it only the fraction; the bucket refills with time.
func TestSampleFloor(t *testing.T) {
	t.Parallel()
	var sm sampler
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	for i := range 30 { // 30 requests in 0.3 s: 10 is the floor's second
		if sm.take(t0.Add(time.Duration(i)*10*time.Millisecond), 10) {
			n++
		}
	}
	if n < 10 || n > 13 {
		t.Errorf("a burst of 30 at a floor of 10/s: %d sampled, want 10 to 13", n)
	}
	n = 0
	for i := range 20 { // one request every 200 ms: under the floor
		if sm.take(t0.Add(time.Second+time.Duration(i)*200*time.Millisecond), 10) {
			n++
		}
	}
	if n != 20 {
		t.Errorf("20 requests at 5/s: %d sampled, want all", n)
	}
	if sm.take(t0.Add(time.Hour), 0) {
		t.Error("a floor of 0 sampled")
	}
}

// TestRowsOverMaxRunRowsRunInParts: a request with more rows than
// MaxRunRows runs as several session calls and answers exactly what one
// call does, for a scikit-learn style classifier (string labels, ZipMap
// probabilities) and an MLP; an uneven last part included.
func TestRowsOverMaxRunRowsRunInParts(t *testing.T) {
	t.Parallel()
	whole, _ := newServer(t, Config{DisableBatching: true})
	parts, _ := newServer(t, Config{DisableBatching: true, MaxRunRows: 5})
	skl, err := os.ReadFile("testdata/sklearn_like_str.onnx")
	if err != nil {
		t.Fatal(err)
	}
	net := newMLP(t, 3, 3, 8, 2)
	for _, s := range []*Server{whole, parts} {
		load(t, s, "skl", "1", skl)
		load(t, s, "mlp", "1", net.model)
	}
	for _, c := range []struct{ model, input string }{{"skl", "float_input"}, {"mlp", "input"}} {
		data, _ := json.Marshal(rows(5, 23, 3))
		body := `{"inputs":[{"name":"` + c.input + `","shape":[23,3],"datatype":"FP32","data":` + string(data) + `}]}`
		code1, want, _ := raw(whole.Handler(), "/v2/models/"+c.model+"/infer", body)
		code2, got, _ := raw(parts.Handler(), "/v2/models/"+c.model+"/infer", body)
		if code1 != 200 || code2 != 200 || got != want {
			t.Errorf("%s: in parts %d %s\nwhole %d %s", c.model, code2, got, code1, want)
		}
	}
}

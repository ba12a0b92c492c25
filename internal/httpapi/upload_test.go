package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/infer/drift"
)

// TestUploadChecksTheReference: a pushed model's drift reference is
// checked field by field before anything is published.
func TestUploadChecksTheReference(t *testing.T) {
	t.Parallel()
	good, err := drift.SummarizeColumns([]string{"a", "b"}, []float64{1, 10, 2, 20, 3, 30, 4, 40}, drift.SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Features = append([]drift.FeatureReference(nil), good.Features...)
	bad.Features[1].Edges = []float64{3, 1}
	for _, c := range []struct {
		name string
		ref  any
		want string // "" for accepted
	}{
		{"good", good, ""},
		{"unsorted-edges", bad, `features[1]: drift: invalid: feature "b": edges not ascending`},
		{"no-features", drift.Reference{}, "not a drift reference with features"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref, _ := json.Marshal(c.ref)
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			fw, _ := mw.CreateFormFile("file", "model.onnx")
			fw.Write([]byte("model bytes"))
			rw, _ := mw.CreateFormField("reference")
			rw.Write(ref)
			mw.Close()
			r := httptest.NewRequest("POST", "/v1/artifacts", &body)
			r.Header.Set("Content-Type", mw.FormDataContentType())
			_, field, err := spoolUpload(r, io.Discard)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %s: %v", field, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || field != "reference"):
				t.Fatalf("got field %q error %v, want reference: %q", field, err, c.want)
			}
		})
	}
}

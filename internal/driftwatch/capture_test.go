package driftwatch

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// TestCapture: after an alarm, the node keeps what its service's retrain
// captures — the ground truth its clients post, or the live inputs
// themselves — and publishes it as a dataset version once it holds the
// rows asked for, naming it in its drift record. Nothing is kept before
// the alarm.
func TestCapture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		source, retrain, header string
	}{
		{policy.CaptureFeedback, "{builtin: {label: class}, capture: {rows: 5}}", "x,y,class"},
		{policy.CaptureInputs, "{command: [train.sh], capture: {rows: 5, source: inputs}}", "x,y"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			t.Parallel()
			cat := catalog.New(catalogtest.NewStore(), nil)
			published := make(chan string, 1)
			var spec storage.PublishSpec
			d := New(Config{Name: "edge-a-1", Site: "edge-a", Catalog: cat, Artifacts: manifests{
				"m@1": {Kind: storage.KindModel, Name: "m", Version: "1", Metadata: map[string]string{catalog.MetaFeatures: "x,y"}},
			}, Publish: func(_ context.Context, path string, s storage.PublishSpec) (storage.Manifest, error) {
				b, err := os.ReadFile(path)
				spec = s
				published <- string(b)
				return storage.Manifest{Kind: s.Kind, Name: s.Name, Version: s.Version}, err
			}})
			src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n" +
				"  drift: {detector: ks, window: 50, reference: first, stream: {}}\n  retrain: " + tc.retrain + "\n"
			if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: src, Generation: 1}); err != nil {
				t.Fatal(err)
			}
			d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: "1"}})
			r := rand.New(rand.NewPCG(1, 2))
			row := func(shift float64) []float64 { return []float64{r.NormFloat64() + shift, r.NormFloat64()} }
			observe := func(x []float64) {
				d.observe(driftRow{model: "m", s: infer.Sample{Version: "1", Inputs: x, Outputs: []float64{0.5}}})
			}
			for range 200 {
				observe(row(0))
			}
			if fb, err := d.Feedback("m", [][]float64{{1, 2}}, []string{"1"}); err != nil || fb.Accepted != 0 || !strings.Contains(fb.Reason, "no drift alarm on m here") {
				t.Fatalf("feedback before any alarm = %+v, %v; want nothing kept, saying why", fb, err)
			}
			for i := 0; !d.mon["m"].rec.Alarmed; i++ {
				if i == 500 {
					t.Fatal("no alarm in 500 shifted rows")
				}
				observe(row(4))
			}
			if c := d.mon["m"].rec.Capture; c == nil || c.Want != 5 || c.Rows != 0 {
				t.Fatalf("capture at the alarm = %+v; want 0 of 5 rows", c)
			}
			if tc.source == policy.CaptureFeedback {
				fb, err := d.Feedback("m", [][]float64{{4, 1}, {5, 0}, {3, 2}}, []string{"1", "0", "1"})
				if err != nil || fb.Accepted != 3 || !fb.Capturing || fb.Rows != 3 {
					t.Fatalf("feedback after the alarm = %+v, %v; want 3 rows kept", fb, err)
				}
				if _, err := d.Feedback("m", [][]float64{{1}}, []string{"1"}); err == nil || !strings.Contains(err.Error(), "row 0 has 1 values; m@1 takes 2 (x, y)") {
					t.Errorf("a row of the wrong width: %v", err)
				}
				if fb, err = d.Feedback("m", [][]float64{{4, 1}, {5, 0}, {3, 2}}, []string{"0", "0", "1"}); err != nil || fb.Accepted != 2 {
					t.Fatalf("feedback past the rows wanted = %+v, %v; want 2 of 3 kept", fb, err)
				}
			} else {
				if fb, err := d.Feedback("m", [][]float64{{4, 1}}, []string{"1"}); err != nil || fb.Accepted != 0 || !strings.Contains(fb.Reason, "keeps the live inputs themselves") {
					t.Errorf("feedback to a capture of inputs = %+v, %v", fb, err)
				}
				for range 5 {
					observe(row(4))
				}
			}
			var csv string
			select {
			case csv = <-published:
			case <-time.After(10 * time.Second):
				t.Fatal("the capture was not published")
			}
			lines := strings.Split(strings.TrimSpace(csv), "\n")
			if len(lines) != 6 || lines[0] != tc.header {
				t.Errorf("captured dataset:\n%s\nwant the header %s and 5 rows", csv, tc.header)
			}
			if spec.Kind != storage.KindDataset || spec.Name != "m-capture" || !strings.HasPrefix(spec.Version, "edge-a-1-") ||
				spec.Metadata[catalog.MetaCaptureSite] != "edge-a" || spec.Metadata[catalog.MetaCaptureVersion] != "1" || spec.Metadata[catalog.MetaCapturePolicy] != "InferenceService/s" {
				t.Errorf("published %+v", spec)
			}
			meshtest.WaitFor(t, 10*time.Second, "the drift record to name the published capture", func() bool {
				d.mu.Lock()
				defer d.mu.Unlock()
				c := d.mon["m"].rec.Capture
				return c != nil && c.Dataset == "m-capture:"+spec.Version && c.Rows == 5
			})
		})
	}
}

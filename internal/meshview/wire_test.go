package meshview

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/placement"
)

// TestRecordWhyKeepsTheDecisionsJSON: a decision's fallbacks and
// rejections, converted for the placement record, write the JSON they
// wrote when the record held placement's own types. A field added to
// placement.Fallback fails here until the catalog's wire type (and its
// golden schema) says whether it travels.
func TestRecordWhyKeepsTheDecisionsJSON(t *testing.T) {
	t.Parallel()
	fbs := []placement.Fallback{{Client: "edge-b", Tier: placement.TierEdge, Reason: placement.ReasonLatencySLO, Message: "edge: 0 of 4 nodes meet p99"}}
	rej := map[placement.Reason]int{placement.ReasonInsufficientCPU: 3, placement.ReasonNoGPU: 1}
	same := func(what string, domain, wire any) {
		t.Helper()
		a, err := json.Marshal(domain)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(wire)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("%s: placement writes %s, the record %s", what, a, b)
		}
	}
	if d, w := reflect.TypeFor[placement.Fallback]().NumField(), reflect.TypeFor[catalog.Fallback]().NumField(); d != w {
		t.Errorf("placement.Fallback has %d fields, catalog.Fallback %d: does the new one travel?", d, w)
	}
	same("fallbacks", fbs, Fallbacks(fbs))
	same("rejected", rej, Rejections(rej))
	res := placement.Resources{CPU: 1500, Memory: 1 << 30, GPUs: 2, GPUModel: "H100", GPUMemory: 80 << 30}
	same("resources", res, catalog.Resources(res))
	if Fallbacks(nil) != nil || Rejections(nil) != nil {
		t.Error("nil did not convert to nil")
	}
	if got := SummarizeRejections(Rejections(rej), Fallbacks(fbs)); got != "3 insufficient_cpu; 1 no_gpu; edge: 0 of 4 nodes meet p99" {
		t.Errorf("SummarizeRejections = %q", got)
	}
}

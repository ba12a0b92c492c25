package serving

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// TestVouchersFollowPlacements: a node is vouched for a model while a
// placement of a service of that model names it (as a replica, or as a
// standby for standbys), and for vouchFor after; never for another model.
func TestVouchersFollowPlacements(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	const key = "InferenceService/svc"
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "svc", Generation: 1,
		Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: {name: fraud}\n"}); err != nil {
		t.Fatal(err)
	}
	place := func(nodes ...catalog.PlacedNode) {
		t.Helper()
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "svc", State: catalog.StatePlaced, Nodes: nodes}); err != nil {
			t.Fatal(err)
		}
	}
	place(catalog.PlacedNode{Name: "edge-1", Standby: "edge-2"})
	now := time.Unix(1000, 0)
	v := NewVouchers(cat)
	v.now = func() time.Time { return now }
	for _, c := range []struct {
		node, model string
		standby     bool
		want        bool
	}{
		{"edge-1", "fraud", false, true},
		{"edge-2", "fraud", true, true},
		{"edge-2", "fraud", false, false}, // a standby, not a replica
		{"edge-1", "fraud", true, false},  // a replica, not a standby
		{"edge-1", "other", false, false},
		{"edge-9", "fraud", false, false}, // claims to serve it; no placement says so
	} {
		if got := v.Vouch(c.node, c.model, c.standby); got != c.want {
			t.Errorf("Vouch(%s, %s, standby %v) = %v, want %v", c.node, c.model, c.standby, got, c.want)
		}
	}
	// Moved to edge-3: edge-1 still answers until edge-3 serves (make
	// before break), and is vouched for vouchFor.
	place(catalog.PlacedNode{Name: "edge-3"})
	now = now.Add(vouchRefresh)
	if !v.Vouch("edge-3", "fraud", false) || !v.Vouch("edge-1", "fraud", false) {
		t.Error("after the move: want edge-3 vouched, and edge-1 still")
	}
	now = now.Add(vouchFor)
	if v.Vouch("edge-1", "fraud", false) {
		t.Errorf("edge-1 vouched %s after its placement stopped naming it", vouchFor+vouchRefresh)
	}
	// A node placed a moment ago is read at once (after vouchRetry).
	place(catalog.PlacedNode{Name: "edge-3"}, catalog.PlacedNode{Name: "edge-4"})
	now = now.Add(vouchRetry)
	if !v.Vouch("edge-4", "fraud", false) {
		t.Error("edge-4, placed a moment ago, not vouched")
	}
	if err := cat.Policies.Delete(key); err != nil {
		t.Fatal(err)
	}
	// The service deleted: its nodes stop being vouched vouchFor later.
	now = now.Add(vouchRefresh)
	v.Vouch("edge-4", "fraud", false)
	now = now.Add(vouchFor)
	if v.Vouch("edge-4", "fraud", false) {
		t.Errorf("edge-4 vouched %s after its service was deleted", vouchFor)
	}
}

// TestForwardOnlyToVouchedNodes: a node whose document says it serves a
// model (and is idle and next door) but that no placement names is not
// sent the request, nor held as a standby: a compromised edge cannot draw
// its site's requests by claiming what it does not serve.
func TestForwardOnlyToVouchedNodes(t *testing.T) {
	t.Parallel()
	liar, honest := fraudNode("edge-liar", mesh.StatusAlive), fraudNode("edge-1", mesh.StatusAlive)
	liar.Standbys = []string{"fraud@1"}
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{liar, honest}, DataPlane: dp,
		Vouch: func(node, model string, standby bool) bool { return node == "edge-1" && model == "fraud" && !standby }})
	for range 20 {
		w := httptest.NewRecorder()
		if err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, to := range dp.to {
		if to.Name != "edge-1" {
			t.Fatalf("a request went to %s, which no placement names", to.Name)
		}
	}
	if f.Unvouched() == 0 {
		t.Error("the liar was not counted")
	}
	// Only the liar claims it: nothing is sent, and the error says so.
	f = NewForwarder(ForwarderConfig{Mesh: peers{liar}, DataPlane: dp, Vouch: func(string, string, bool) bool { return false }})
	if err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err == nil {
		t.Error("forwarded to a node no placement names")
	}
}

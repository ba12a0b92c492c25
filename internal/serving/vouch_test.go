package serving

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// TestVouchersFollowPlacements: a node is vouched for a model once a
// placement of a service of that model names it (as a replica, or as a
// standby for standbys), and stays so while the service exists and
// serves that model: a moved replica answers until its replacements do.
// Never for another model; a service named by digest vouches for the
// model published with it. The same where each read lists the tables
// afresh.
func TestVouchersFollowPlacements(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]catalog.Store{"by key": catalogtest.NewStore(), "listed afresh": catalogtest.Relisting{S: catalogtest.NewStore()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vouchersFollowPlacements(t, catalog.New(store, nil))
		})
	}
}

// vouchersFollowPlacements is TestVouchersFollowPlacements over cat.
func vouchersFollowPlacements(t *testing.T, cat *catalog.Catalog) {
	const key = "InferenceService/svc"
	apply := func(model string) {
		t.Helper()
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "svc", Generation: 1,
			Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: " + model + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	place := func(nodes ...catalog.PlacedNode) {
		t.Helper()
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "svc", State: catalog.StatePlaced, Nodes: nodes}); err != nil {
			t.Fatal(err)
		}
	}
	// The placement arrives before its policy, as gossip may have it.
	place(catalog.PlacedNode{Name: "edge-1", Standby: "edge-2"})
	v := NewVouchers(cat)
	if v.Vouch("edge-1", "fraud", false) {
		t.Error("edge-1 vouched before the policy saying what the service serves")
	}
	apply("{name: fraud}")
	if got := v.Declared("fraud"); got != key {
		t.Errorf("Declared(fraud) = %q, want %s", got, key)
	}
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
	// before break), however long that takes.
	place(catalog.PlacedNode{Name: "edge-3"})
	if !v.Vouch("edge-3", "fraud", false) || !v.Vouch("edge-1", "fraud", false) {
		t.Error("after the move: want edge-3 vouched, and edge-1 still")
	}
	// The service now serves another model, named by its digest.
	d2 := "sha256:" + strings.Repeat("d2", 32)
	if _, err := cat.Manifests.Put(storage.Manifest{Kind: storage.KindModel, Name: "scorer", Version: "2", Digest: d2}); err != nil {
		t.Fatal(err)
	}
	apply("{digest: \"" + d2 + "\"}")
	if v.Vouch("edge-3", "fraud", false) || !v.Vouch("edge-3", "scorer", false) || v.Vouch("edge-1", "scorer", false) {
		t.Error("the service serves scorer now: want edge-3 vouched for scorer only, edge-1 for nothing")
	}
	if err := cat.Policies.Delete(key); err != nil {
		t.Fatal(err)
	}
	if v.Vouch("edge-3", "scorer", false) {
		t.Error("edge-3 vouched after its service was deleted")
	}
	if got := v.Declared("scorer"); got != "" {
		t.Errorf("Declared(scorer) = %q after its service was deleted, want none", got)
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

// status answers every request with its code.
type status int

func (s status) RoundTrip(context.Context, dataplane.Peer, *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: int(s), Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"error":"busy"}`))}, nil
}

// TestFallbackTakesNoRefusal: a caller that can answer itself (a busy
// replica spilling, a warm standby) gets an error, not the replica's
// 429 or 503, so that it answers; one without a fallback gets the
// replica's answer, as before.
func TestFallbackTakesNoRefusal(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("edge-1", mesh.StatusAlive)}, DataPlane: status(code)})
		r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`))
		if err := f.Forward(httptest.NewRecorder(), r.WithContext(infer.WithFallback(r.Context())), "fraud", ""); err == nil {
			t.Errorf("%d with a fallback: no error; want one, for the caller to answer", code)
		}
		w := httptest.NewRecorder()
		if err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err != nil || w.Code != code {
			t.Errorf("%d without a fallback: %v, %d; want the replica's answer passed on", code, err, w.Code)
		}
	}
}

// TestSpillGoesOnlyWhereSooner: a busy replica's spill (infer.WithSpill)
// goes to a replica expected to answer sooner than it would (RTT plus
// p50 times the requests ahead there), never to a busier one.
func TestSpillGoesOnlyWhereSooner(t *testing.T) {
	t.Parallel()
	busy := fraudNode("edge-1", mesh.StatusAlive)
	busy.Traffic = []mesh.ModelTraffic{{Model: "fraud@1", P50: 10, Inflight: 10}} // about 110 ms ahead
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{busy}, DataPlane: dp})
	spill := func(here time.Duration) error {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`))
		return f.Forward(httptest.NewRecorder(), r.WithContext(infer.WithSpill(infer.WithFallback(r.Context()), here)), "fraud", "")
	}
	if err := spill(50 * time.Millisecond); err == nil || len(dp.to) != 0 {
		t.Errorf("spilled from a replica 50ms from its answer to one 110ms away: %v, sent %d", err, len(dp.to))
	}
	if err := spill(500 * time.Millisecond); err != nil || len(dp.to) != 1 {
		t.Errorf("spilled from a replica 500ms from its answer: %v, sent %d; want it sent", err, len(dp.to))
	}
}

// TestPromotedStandbyIsATarget: when a replica fails, the owner promotes
// its standby, and the standby's document saying it serves can reach an
// agent before the placement naming it a replica. A node named the
// model's standby is a target for it; a suspect standby is tried too,
// after the alive ones.
func TestPromotedStandbyIsATarget(t *testing.T) {
	t.Parallel()
	promoted := fraudNode("edge-2", mesh.StatusAlive) // serves fraud@1 now
	onlyStandby := func(node, model string, standby bool) bool { return node == "edge-2" && model == "fraud" && standby }
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{promoted}, DataPlane: dp, Vouch: onlyStandby})
	if err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err != nil {
		t.Fatalf("a promoted standby is not a target: %v", err)
	}
	suspect := fraudNode("edge-3", mesh.StatusSuspect)
	suspect.Models, suspect.Standbys = nil, []string{"fraud@1"}
	dp = &recorder{}
	f = NewForwarder(ForwarderConfig{Mesh: peers{suspect}, DataPlane: dp, Vouch: func(node, _ string, standby bool) bool { return node == "edge-3" && standby }})
	if err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err != nil || len(dp.to) != 1 || dp.to[0].Name != "edge-3" {
		t.Fatalf("a suspect warm standby, the only one, was not tried: %v, sent to %v", err, dp.to)
	}
}

// TestDeclaredByDigest: a service that names its model by a digest
// whose manifest comes after it declares the model once the manifest
// is here, though the policy does not change.
func TestDeclaredByDigest(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	d := "sha256:" + strings.Repeat("ab", 32)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "pinned", Generation: 1,
		Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: pinned}\nspec:\n  model: {digest: \"" + d + "\"}\n"}); err != nil {
		t.Fatal(err)
	}
	v := NewVouchers(cat)
	if got := v.Declared("late"); got != "" {
		t.Errorf("before its manifest: Declared(late) = %q, want none", got)
	}
	if got := v.Declared(anyModel); got != "" {
		t.Errorf("Declared(%q) = %q, want none", anyModel, got)
	}
	if _, err := cat.Manifests.Put(storage.Manifest{Kind: storage.KindModel, Name: "late", Version: "1", Digest: d}); err != nil {
		t.Fatal(err)
	}
	if got := v.Declared("late"); got != "InferenceService/pinned" {
		t.Errorf("after its manifest: Declared(late) = %q, want InferenceService/pinned", got)
	}
}

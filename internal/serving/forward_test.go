package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

type peers []mesh.Node

func (p peers) ID() string                             { return "self" }
func (p peers) Name() string                           { return "self" }
func (p peers) Nodes() []mesh.Node                     { return p }
func (p peers) RTT(a, b string) (time.Duration, error) { return time.Millisecond, nil }

// fraudNode is a node named name, of status st, that serves fraud@1 and
// has a data-plane address.
func fraudNode(name string, st mesh.Status) mesh.Node {
	n := mesh.Node{Status: st}
	n.ID, n.Name, n.Models, n.Addrs.Data = "id-"+name, name, []string{"fraud@1"}, name+":7471"
	return n
}

// TestWhyNotServed: a request for a model no agent serves says why:
// loading, failed to load (with the reason), another version, or nothing.
func TestWhyNotServed(t *testing.T) {
	t.Parallel()
	node := func(name string, models []string, reps ...mesh.Replica) mesh.Node {
		n := mesh.Node{Status: mesh.StatusAlive}
		n.ID, n.Name, n.Models, n.Replicas = name, name, models, reps
		return n
	}
	f := NewForwarder(ForwarderConfig{Mesh: peers{
		node("edge-1", []string{"fraud@1"}, mesh.Replica{Model: "fraud@2", State: mesh.ReplicaLoading}),
		node("edge-2", nil, mesh.Replica{Model: "gelu@1", State: mesh.ReplicaFailed, Reason: "unsupported operator Gelu (opset ai.onnx 13)"}),
	}})
	for _, c := range []struct {
		model, version string
		is             error
		want           string
	}{
		{"fraud", "2", infer.ErrModelNotReady, "fraud@2 is loading on edge-1"},
		{"gelu", "", infer.ErrModelNotReady, "gelu failed to load (edge-2: unsupported operator Gelu (opset ai.onnx 13))"},
		{"fraud", "3", infer.ErrModelNotFound, "version 3 of fraud is served nowhere (served versions: 1)"},
		{"other", "", infer.ErrModelNotFound, "other is served nowhere in the mesh"},
	} {
		err := f.whyNot(c.model, c.version)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("whyNot(%s, %q) = %v; want %v with %q", c.model, c.version, err, c.is, c.want)
		}
	}
	// A model a service declares, that no replica serves yet as this
	// agent sees the mesh: not ready (retry), not not found.
	f.cfg.Declared = func(model string) string {
		if model == "scorer" {
			return "InferenceService/scorer"
		}
		return ""
	}
	if err := f.whyNot("scorer", ""); !errors.Is(err, infer.ErrModelNotReady) || !strings.Contains(err.Error(), "InferenceService/scorer serves scorer, and no replica of it serves yet") {
		t.Errorf("a declared model no replica serves yet: %v", err)
	}
	if err := f.whyNot("other", ""); !errors.Is(err, infer.ErrModelNotFound) {
		t.Errorf("a model nothing declares: %v, want not found", err)
	}
}

// TestServingNodesSuspectsLast: a suspect node that serves the model is
// still a target (it most often answers), after every alive one; a failed
// one is not.
func TestServingNodesSuspectsLast(t *testing.T) {
	t.Parallel()
	f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("s", mesh.StatusSuspect), fraudNode("a", mesh.StatusAlive), fraudNode("f", mesh.StatusFailed)}})
	var got []string
	for _, n := range f.ServingNodes("fraud", "") {
		got = append(got, n.Name)
	}
	if strings.Join(got, ",") != "a,s" {
		t.Errorf("targets %v, want [a s]", got)
	}
	f = NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("f", mesh.StatusFailed)}})
	if err := f.whyNot("fraud", ""); err == nil || !strings.Contains(err.Error(), "served nowhere") {
		t.Errorf("only a failed node serves: %v", err)
	}
}

// recorder is a data plane that records what it was asked to send.
type recorder struct {
	to  []dataplane.Peer
	req []*http.Request
}

func (r *recorder) RoundTrip(_ context.Context, to dataplane.Peer, req *http.Request) (*http.Response, error) {
	r.to, r.req = append(r.to, to), append(r.req, req)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// TestForwardedRequestsCarryNoCredentials: what a forwarded request
// carries is the caller's request less its credentials, marked as
// forwarded by this agent and from its site, addressed to the target by data-plane address,
// name and ID (the data plane checks the certificate against the last
// two).
func TestForwardedRequestsCarryNoCredentials(t *testing.T) {
	t.Parallel()
	target := mesh.Node{Status: mesh.StatusAlive}
	target.ID, target.Name, target.Models, target.Addrs.API, target.Addrs.Data = "id-edge-1", "edge-1", []string{"fraud@1"}, "10.0.0.1:7470", "10.0.0.1:7471"
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{target}, DataPlane: dp, Site: "edge-a"})
	r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer?x=1", strings.NewReader(`{"inputs":[]}`))
	for k, v := range map[string]string{
		"Authorization": "Bearer s3cret", "Proxy-Authorization": "Basic czNjcmV0", "Cookie": "session=s3cret",
		"Content-Type": "application/json", "Traceparent": "00-abc-def-01", HeaderClientSite: "elsewhere",
	} {
		r.Header.Set(k, v)
	}
	if err := f.Forward(httptest.NewRecorder(), r, "fraud", ""); err != nil {
		t.Fatal(err)
	}
	if len(dp.req) != 1 {
		t.Fatalf("%d requests sent, want 1", len(dp.req))
	}
	got := dp.req[0]
	for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
		if v := got.Header.Values(h); len(v) > 0 {
			t.Errorf("forwarded request carries %s: %q", h, v)
		}
	}
	for h, want := range map[string]string{"Content-Type": "application/json", "Traceparent": "00-abc-def-01", HeaderForwarded: "self", HeaderClientSite: "edge-a"} {
		if v := got.Header.Get(h); v != want {
			t.Errorf("forwarded %s = %q, want %q", h, v, want)
		}
	}
	if want := (dataplane.Peer{Addr: "10.0.0.1:7471", Name: "edge-1", ID: "id-edge-1"}); dp.to[0] != want {
		t.Errorf("sent to %+v, want %+v", dp.to[0], want)
	}
	if got.URL.Host != "10.0.0.1:7471" || got.URL.RequestURI() != "/v2/models/fraud/infer?x=1" {
		t.Errorf("forwarded URL %s", got.URL)
	}
	if r.Header.Get("Authorization") != "Bearer s3cret" {
		t.Error("the caller's own request lost its Authorization header")
	}
}

// TestForwardingNeedsTheDataPlane: without a data plane here, or a data
// address there, nothing is sent, and the error says what is missing.
func TestForwardingNeedsTheDataPlane(t *testing.T) {
	t.Parallel()
	withData := mesh.Node{Status: mesh.StatusAlive}
	withData.ID, withData.Name, withData.Models, withData.Addrs.API, withData.Addrs.Data = "a", "edge-1", []string{"fraud@1"}, "10.0.0.1:7470", "10.0.0.1:7471"
	noData := withData
	noData.Name, noData.Addrs.Data = "edge-2", ""
	for _, c := range []struct {
		name string
		dp   RoundTripper
		to   mesh.Node
		want string
	}{
		{"no-data-plane-here", nil, withData, "this agent has none, so it cannot send to edge-1"},
		{"no-data-address-there", &recorder{}, noData, "edge-2 advertises no data-plane address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewForwarder(ForwarderConfig{Mesh: peers{c.to}, DataPlane: c.dp})
			_, err := f.Send(context.Background(), c.to, http.MethodGet, "/v1/jobs/j/logs", http.Header{"Authorization": {"Bearer s3cret"}}, nil)
			if !errors.Is(err, ErrNoDataPlane) || !strings.Contains(err.Error(), "forwarding needs the data plane (mesh CA): "+c.want) {
				t.Errorf("Send = %v; want ErrNoDataPlane saying %q", err, c.want)
			}
			if rec, ok := c.dp.(*recorder); ok && len(rec.req) > 0 {
				t.Errorf("%d requests sent", len(rec.req))
			}
		})
	}
	// Forward says so before it reads the body: no agent without a data
	// plane sends a model's request anywhere.
	f := NewForwarder(ForwarderConfig{Mesh: peers{withData}})
	err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", nil), "fraud", "")
	if !errors.Is(err, ErrNoDataPlane) || !strings.Contains(err.Error(), "fraud is served on edge-1, and this agent has no data plane") {
		t.Errorf("Forward without a data plane = %v", err)
	}
}

// TestSendDropsBrowserHeaders: a request a browser sent to this agent's
// API (same-origin: the dashboard) is forwarded without its Origin and
// Sec-Fetch-* headers, which the peer's API would take for a page of
// another origin.
func TestSendDropsBrowserHeaders(t *testing.T) {
	t.Parallel()
	peer := mesh.Node{Status: mesh.StatusAlive}
	peer.ID, peer.Name, peer.Addrs.Data = "p", "p", "10.0.0.1:7471"
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{peer}, DataPlane: dp})
	h := http.Header{}
	for k, v := range map[string]string{"Origin": "http://127.0.0.1:7470", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Cookie": "a=b",
		"Content-Type": "application/json"} {
		h.Set(k, v)
	}
	resp, err := f.Send(context.Background(), peer, http.MethodPost, "/v2/models/m/infer", h, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := dp.req[0].Header
	for _, k := range []string{"Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Cookie"} {
		if v := sent.Get(k); v != "" {
			t.Errorf("forwarded %s: %s", k, v)
		}
	}
	for _, k := range []string{"Content-Type", HeaderForwarded} {
		if sent.Get(k) == "" {
			t.Errorf("%s not forwarded", k)
		}
	}
}

// TestForwardToAnotherSite: a model served by no node of this agent's pool
// is forwarded to a node of another site that serves it (from that site's
// summary), by its certificate's name; one served here is not.
func TestForwardToAnotherSite(t *testing.T) {
	t.Parallel()
	remote := mesh.Node{NodeState: mesh.NodeState{Name: "b-edge-1", Site: "edge-b"}, Status: mesh.StatusAlive}
	remote.Addrs.Data = "10.2.0.1:7471"
	var asked []string
	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{}, DataPlane: dp, Remote: func(model, version string) []mesh.Node {
		asked = append(asked, model+"@"+version)
		if model == "fraud" {
			return []mesh.Node{remote}
		}
		return nil
	}})
	r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{"inputs":[]}`))
	if err := f.Forward(httptest.NewRecorder(), r, "fraud", "2"); err != nil {
		t.Fatal(err)
	}
	if len(dp.to) != 1 || dp.to[0] != (dataplane.Peer{Addr: "10.2.0.1:7471", Name: "b-edge-1"}) || asked[0] != "fraud@2" {
		t.Errorf("sent to %+v (asked %v), want b-edge-1 of edge-b", dp.to, asked)
	}
	err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/other/infer", nil), "other", "")
	if !errors.Is(err, infer.ErrModelNotFound) || !strings.Contains(err.Error(), "served nowhere") {
		t.Errorf("a model no site serves: %v", err)
	}
}

// stalled is a data plane whose peers never answer: each round trip
// waits until its context ends.
type stalled struct{ tried []string }

func (s *stalled) RoundTrip(ctx context.Context, to dataplane.Peer, _ *http.Request) (*http.Response, error) {
	s.tried = append(s.tried, to.Name)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestForwardToNodesBelievedFailed: when every node that serves a model is
// believed failed (a starved agent's failure detector can be wrong about
// all its peers at once), the request is still tried on them, as a last
// resort: answered when one answers; otherwise a 503 error (not ready)
// naming them, after a bounded wait, instead of a 404 "served nowhere".
// A node that left is not tried.
func TestForwardToNodesBelievedFailed(t *testing.T) {
	t.Parallel()
	mesh3 := peers{fraudNode("gpu-1", mesh.StatusFailed), fraudNode("gone", mesh.StatusLeft), fraudNode("cloud-1", mesh.StatusUnreachable)}

	dp := &recorder{}
	f := NewForwarder(ForwarderConfig{Mesh: mesh3, DataPlane: dp})
	w := httptest.NewRecorder()
	if err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", ""); err != nil || w.Code != http.StatusOK {
		t.Fatalf("forward to nodes believed failed that answer: %v (HTTP %d)", err, w.Code)
	}
	if len(dp.to) != 1 || dp.to[0].Name == "gone" {
		t.Errorf("sent to %v; want one node believed failed, never the one that left", dp.to)
	}

	// Peers that never answer: without the bound on each try, Forward
	// would wait here until the test times out.
	dead := &stalled{}
	f = NewForwarder(ForwarderConfig{Mesh: mesh3, DataPlane: dead})
	err := f.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)), "fraud", "")
	if !errors.Is(err, infer.ErrModelNotReady) || !strings.Contains(err.Error(), "believes failed") || len(dead.tried) != 2 {
		t.Errorf("forward to dead nodes: %v after trying %v; want not ready, naming the nodes believed failed, after trying both", err, dead.tried)
	}
}

// halfDead is a data plane where the peers named in dead never answer
// (each round trip waits until its context ends) and the others answer
// 200 while the request's context lasts. Safe for concurrent use.
type halfDead struct {
	dead  map[string]bool
	mu    sync.Mutex
	tried []string
	// gaveUp, when set, is called when a dead peer's round trip ends.
	gaveUp func()
}

func (h *halfDead) RoundTrip(ctx context.Context, to dataplane.Peer, _ *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.tried = append(h.tried, to.Name)
	h.mu.Unlock()
	if h.dead[to.Name] {
		<-ctx.Done()
		if h.gaveUp != nil {
			h.gaveUp()
		}
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

func (h *halfDead) triedSoFar() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tried)
}

// TestForwardPastANodeThatDoesNotAnswer: a replica that died a moment ago
// is still alive in the mesh's view for seconds. A request sent to it is
// given up after a bound (not the 30 s a forwarded request may take) and
// answered by the next replica, and for the next ejectFor the dead one is
// tried only after the others; then it is tried first again.
func TestForwardPastANodeThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	dp := &halfDead{dead: map[string]bool{"edge-1": true}}
	f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("edge-1", mesh.StatusAlive), fraudNode("edge-2", mesh.StatusAlive)}, DataPlane: dp})
	f.draw = func() float64 { return 0 } // the power of two choices picks edge-1, the first listed
	now := time.Now()
	f.now = func() time.Time { return now }
	var tried string // the last answer's HeaderTried
	forward := func() error {
		// The caller waits 10 s: without a bound on each try, the one to
		// edge-1 would take all of it and edge-2 would never be asked.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)).WithContext(ctx), "fraud", "")
		if err == nil && w.Code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", w.Code)
		}
		tried = w.Header().Get(HeaderTried)
		return err
	}
	if err := forward(); err != nil {
		t.Fatalf("edge-1 does not answer, edge-2 does: %v after trying %v", err, dp.triedSoFar())
	}
	if got := dp.triedSoFar(); !slices.Equal(got, []string{"edge-1", "edge-2"}) {
		t.Fatalf("tried %v, want edge-1 then edge-2", got)
	}
	if want := "edge-1: did not answer within " + tryFloor.String(); tried != want {
		t.Errorf("%s = %q, want %q: the answer from further away says why", HeaderTried, tried, want)
	}
	if err := forward(); err != nil {
		t.Fatal(err)
	}
	if got := dp.triedSoFar(); !slices.Equal(got, []string{"edge-1", "edge-2", "edge-2"}) {
		t.Fatalf("tried %v; want edge-2 alone the second time: edge-1 failed a request a moment ago", got)
	}
	if tried != "" {
		t.Errorf("%s = %q on an answer from the first replica tried, want none", HeaderTried, tried)
	}
	now = now.Add(ejectFor + time.Second)
	if err := forward(); err != nil {
		t.Fatal(err)
	}
	if got := dp.triedSoFar(); !slices.Equal(got[3:], []string{"edge-1", "edge-2"}) {
		t.Fatalf("tried %v; want edge-1 first again once ejectFor has passed", got)
	}
}

// slowToConnect is a data plane whose first use of each peer (Connect, or
// a round trip when nothing connected first) takes dial, as a handshake
// on a busy host does, or never ends for the peers named in dead; then
// each round trip answers 200 at once. Safe for concurrent use.
type slowToConnect struct {
	dial      time.Duration
	dead      map[string]bool
	mu        sync.Mutex
	connected map[string]bool
	tried     []string
}

func (s *slowToConnect) Connect(ctx context.Context, to dataplane.Peer) error {
	s.mu.Lock()
	up := s.connected[to.Name]
	s.mu.Unlock()
	if up {
		return nil
	}
	if s.dead[to.Name] {
		<-ctx.Done()
		return ctx.Err()
	}
	// The handshake's time is what is under test.
	select {
	case <-time.After(s.dial):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	if s.connected == nil {
		s.connected = map[string]bool{}
	}
	s.connected[to.Name] = true
	s.mu.Unlock()
	return nil
}

func (s *slowToConnect) RoundTrip(ctx context.Context, to dataplane.Peer, _ *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.tried = append(s.tried, to.Name)
	s.mu.Unlock()
	if err := s.Connect(ctx, to); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// TestForwardCountsTheAnswerNotTheHandshake: the first request to a
// replica also opens the connection to it, which on a busy host can take
// longer than the bound on the replica's answer. The connection has a
// bound of its own (connectTimeout), so the nearest replica answers and
// is not ejected, rather than the request crossing to the next one; a
// replica never connected to is passed over once that bound has passed.
func TestForwardCountsTheAnswerNotTheHandshake(t *testing.T) {
	t.Parallel()
	forward := func(f *Forwarder) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)).WithContext(ctx), "fraud", "")
		return w.Header().Get(HeaderTried), err
	}
	peers := peers{fraudNode("edge-1", mesh.StatusAlive), fraudNode("edge-2", mesh.StatusAlive)}
	t.Run("slow handshake", func(t *testing.T) {
		t.Parallel()
		dp := &slowToConnect{dial: 2 * tryFloor}
		f := NewForwarder(ForwarderConfig{Mesh: peers, DataPlane: dp})
		f.draw = func() float64 { return 0 } // edge-1 first
		if tried, err := forward(f); err != nil || !slices.Equal(dp.tried, []string{"edge-1"}) || tried != "" || f.isEjected("edge-1") {
			t.Errorf("forward: %v, sent to %v, %s %q, edge-1 ejected %v; want edge-1 alone to answer once connected", err, dp.tried, HeaderTried, tried, f.isEjected("edge-1"))
		}
	})
	t.Run("no connection", func(t *testing.T) {
		t.Parallel()
		dp := &slowToConnect{dead: map[string]bool{"edge-1": true}}
		f := NewForwarder(ForwarderConfig{Mesh: peers, DataPlane: dp})
		f.draw = func() float64 { return 0 } // edge-1 first
		tried, err := forward(f)
		if err != nil || !slices.Equal(dp.tried, []string{"edge-2"}) || !f.isEjected("edge-1") {
			t.Errorf("forward: %v, sent to %v, edge-1 ejected %v; want edge-2 to answer, edge-1 ejected", err, dp.tried, f.isEjected("edge-1"))
		}
		if want := "edge-1: no connection within " + connectTimeout.String(); tried != want {
			t.Errorf("%s = %q, want %q", HeaderTried, tried, want)
		}
	})
}

// TestForwardWithAFallback: a caller with a standby of the model
// (infer.WithFallback) hears soon that the only replica does not answer,
// instead of waiting for it as long as a request may take, and while the
// replica is ejected it is not tried at all; nor is a suspect one.
func TestForwardWithAFallback(t *testing.T) {
	t.Parallel()
	dp := &halfDead{dead: map[string]bool{"edge-1": true}}
	f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("edge-1", mesh.StatusAlive), fraudNode("edge-3", mesh.StatusSuspect)}, DataPlane: dp})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	forward := func() error {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)).WithContext(infer.WithFallback(ctx))
		return f.Forward(httptest.NewRecorder(), r, "fraud", "")
	}
	if err := forward(); err == nil || ctx.Err() != nil {
		t.Fatalf("forward to a replica that does not answer: %v (the caller's context: %v); want an error before the caller gives up", err, ctx.Err())
	}
	if err := forward(); !errors.Is(err, infer.ErrModelNotFound) {
		t.Errorf("forward while the replica is ejected: %v, want not found (the caller answers from its standby)", err)
	}
	if got := dp.triedSoFar(); !slices.Equal(got, []string{"edge-1"}) {
		t.Errorf("tried %v, want edge-1 once and never the suspect edge-3", got)
	}
}

// TestEjectedThoughTheCallerLeft: a replica that let its try's bound pass
// is ejected even when the caller gave up at that same moment (a client
// that waits a second, as many do).
func TestEjectedThoughTheCallerLeft(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	dp := &halfDead{dead: map[string]bool{"edge-1": true}, gaveUp: cancel}
	f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("edge-1", mesh.StatusAlive), fraudNode("edge-2", mesh.StatusAlive)}, DataPlane: dp})
	f.draw = func() float64 { return 0 } // edge-1 first
	r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)).WithContext(ctx)
	if err := f.Forward(httptest.NewRecorder(), r, "fraud", ""); err == nil {
		t.Fatal("forward: the caller left, want an error")
	}
	if !f.isEjected("edge-1") {
		t.Error("edge-1 did not answer within its bound and is not ejected")
	}
}

// TestLargeRequestsAreNotBounded: a request body over boundedBody may
// take far longer than a replica's usual requests, so its tries are not
// cut short (computing it again elsewhere, ejecting a busy replica): it
// waits on the first replica as long as its caller does.
func TestLargeRequestsAreNotBounded(t *testing.T) {
	t.Parallel()
	dp := &halfDead{dead: map[string]bool{"edge-1": true}}
	f := NewForwarder(ForwarderConfig{Mesh: peers{fraudNode("edge-1", mesh.StatusAlive), fraudNode("edge-2", mesh.StatusAlive)}, DataPlane: dp})
	f.draw = func() float64 { return 0 } // edge-1 first
	ctx, cancel := context.WithTimeout(context.Background(), 3*tryFloor)
	defer cancel()
	big := strings.Repeat(" ", boundedBody+1)
	r := httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(big)).WithContext(ctx)
	if err := f.Forward(httptest.NewRecorder(), r, "fraud", ""); err == nil || f.isEjected("edge-1") {
		t.Errorf("a large request to a replica that does not answer: %v, edge-1 ejected %v; want it waited on until the caller left, not ejected", err, f.isEjected("edge-1"))
	}
}

// TestForwardToAWarmStandby: a node that holds the model as a warm
// standby (it lists it in standbys, not in models) is asked when the
// replica does not answer, first while the replica is ejected, and when
// the replica is known failed; never while the replica answers.
func TestForwardToAWarmStandby(t *testing.T) {
	t.Parallel()
	replica := mesh.Node{Status: mesh.StatusAlive}
	replica.ID, replica.Name, replica.Models, replica.Addrs.Data = "id-edge-1", "edge-1", []string{"fraud@1"}, "edge-1:7471"
	standby := mesh.Node{Status: mesh.StatusAlive}
	standby.ID, standby.Name, standby.Standbys, standby.Addrs.Data = "id-edge-2", "edge-2", []string{"fraud@1"}, "edge-2:7471"
	forward := func(f *Forwarder) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		err := f.Forward(w, httptest.NewRequest(http.MethodPost, "/v2/models/fraud/infer", strings.NewReader(`{}`)).WithContext(ctx), "fraud", "1")
		if err == nil && w.Code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", w.Code)
		}
		return err
	}

	live := &halfDead{}
	f := NewForwarder(ForwarderConfig{Mesh: peers{replica, standby}, DataPlane: live})
	if err := forward(f); err != nil || !slices.Equal(live.triedSoFar(), []string{"edge-1"}) {
		t.Errorf("replica answering: %v after trying %v; want edge-1 alone", err, live.triedSoFar())
	}

	dead := &halfDead{dead: map[string]bool{"edge-1": true}}
	f = NewForwarder(ForwarderConfig{Mesh: peers{replica, standby}, DataPlane: dead})
	for range 2 {
		if err := forward(f); err != nil {
			t.Fatalf("replica silent, standby warm: %v after trying %v", err, dead.triedSoFar())
		}
	}
	if got := dead.triedSoFar(); !slices.Equal(got, []string{"edge-1", "edge-2", "edge-2"}) {
		t.Errorf("tried %v; want edge-1 then the standby, then the standby first while edge-1 is ejected", got)
	}

	replica.Status = mesh.StatusFailed
	dead = &halfDead{dead: map[string]bool{"edge-1": true}}
	f = NewForwarder(ForwarderConfig{Mesh: peers{replica, standby}, DataPlane: dead})
	if err := forward(f); err != nil || !slices.Equal(dead.triedSoFar(), []string{"edge-2"}) {
		t.Errorf("replica failed: %v after trying %v; want the standby alone", err, dead.triedSoFar())
	}
}

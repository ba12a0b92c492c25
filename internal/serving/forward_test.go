package serving

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
)

type peers []mesh.Node

func (p peers) ID() string                             { return "self" }
func (p peers) Name() string                           { return "self" }
func (p peers) Nodes() []mesh.Node                     { return p }
func (p peers) RTT(a, b string) (time.Duration, error) { return time.Millisecond, nil }

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
}

// TestServingNodesSuspectsLast: a suspect node that serves the model is
// still a target (it most often answers), after every alive one; a failed
// one is not.
func TestServingNodesSuspectsLast(t *testing.T) {
	t.Parallel()
	node := func(name string, st mesh.Status) mesh.Node {
		n := mesh.Node{Status: st}
		n.ID, n.Name, n.Models, n.Addrs.API = name, name, []string{"fraud@1"}, name+":7470"
		return n
	}
	f := NewForwarder(ForwarderConfig{Mesh: peers{node("s", mesh.StatusSuspect), node("a", mesh.StatusAlive), node("f", mesh.StatusFailed)}})
	var got []string
	for _, n := range f.ServingNodes("fraud", "") {
		got = append(got, n.Name)
	}
	if strings.Join(got, ",") != "a,s" {
		t.Errorf("targets %v, want [a s]", got)
	}
	f = NewForwarder(ForwarderConfig{Mesh: peers{node("f", mesh.StatusFailed)}})
	if err := f.whyNot("fraud", ""); err == nil || !strings.Contains(err.Error(), "served nowhere") {
		t.Errorf("only a failed node serves: %v", err)
	}
}

// TestSendDropsBrowserHeaders: a request a browser sent to this agent's
// API (same-origin: the dashboard) is forwarded without its Origin and
// Sec-Fetch-* headers, which the peer's API would take for a page of
// another origin.
func TestSendDropsBrowserHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(srv.Close)
	peer := mesh.Node{Status: mesh.StatusAlive}
	peer.ID, peer.Name, peer.Addrs.API = "p", "p", srv.Listener.Addr().String()
	f := NewForwarder(ForwarderConfig{Mesh: peers{peer}})
	h := http.Header{}
	for k, v := range map[string]string{"Origin": "http://127.0.0.1:7470", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Cookie": "a=b",
		"Content-Type": "application/json", "Authorization": "Bearer t"} {
		h.Set(k, v)
	}
	resp, err := f.Send(context.Background(), peer, http.MethodPost, "/v2/models/m/infer", h, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := <-got
	for _, k := range []string{"Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Cookie"} {
		if v := sent.Get(k); v != "" {
			t.Errorf("forwarded %s: %s", k, v)
		}
	}
	for _, k := range []string{"Content-Type", "Authorization", HeaderForwarded} {
		if sent.Get(k) == "" {
			t.Errorf("%s not forwarded", k)
		}
	}
}

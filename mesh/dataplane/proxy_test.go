package dataplane

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	ca := newTestCA(t)
	server := startNode(t, ca, "server", "", nodeOpts{mutate: func(c *Config) {
		c.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Peer", r.Header.Get(HeaderPeer))
			w.Header().Set("X-Path", r.URL.RequestURI())
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, r.Method+" "+strings.ToUpper(string(body)))
		})
	}})
	client := startNode(t, ca, "client", "", nodeOpts{})
	to := Peer{Addr: server.Addr().String(), Name: "server"}

	req, _ := http.NewRequest(http.MethodPost, "http://peer/v2/models/m/infer?x=1", strings.NewReader("hello"))
	req.Header.Set(HeaderPeer, "forged") // the server sets it from the certificate
	resp, err := client.RoundTrip(context.Background(), to, req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTeapot || string(body) != "POST HELLO" {
		t.Fatalf("got %d %q, want 418 \"POST HELLO\"", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Peer"); got != "client" {
		t.Errorf("handler saw peer %q, want the client's certificate name %q", got, "client")
	}
	if got := resp.Header.Get("X-Path"); got != "/v2/models/m/infer?x=1" {
		t.Errorf("handler saw path %q", got)
	}
	if st := client.Stats(); st.Proxied != 1 {
		t.Errorf("client Proxied = %d, want 1", st.Proxied)
	}
	if st := server.Stats(); st.ProxyServed != 1 {
		t.Errorf("server ProxyServed = %d, want 1", st.ProxyServed)
	}

	// A node without a handler answers 501 rather than hanging up.
	req, _ = http.NewRequest(http.MethodGet, "http://peer/v2/health/live", nil)
	resp, err = server.RoundTrip(context.Background(), Peer{Addr: client.Addr().String(), Name: "client"}, req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("node without a handler: status %d, want 501", resp.StatusCode)
	}
}

// A caller that gives up cancels the request at the serving node.
func TestRoundTripCanceled(t *testing.T) {
	ca := newTestCA(t)
	canceled := make(chan struct{})
	server := startNode(t, ca, "server", "", nodeOpts{mutate: func(c *Config) {
		c.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			close(canceled)
		})
	}})
	client := startNode(t, ca, "client", "", nodeOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequest(http.MethodGet, "http://peer/slow", nil)
	_, err := client.RoundTrip(ctx, Peer{Addr: server.Addr().String(), Name: "server"}, req)
	if err == nil {
		t.Fatal("RoundTrip returned no error after its context ended")
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the serving handler's context did not end after the caller gave up")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("context: %v", ctx.Err())
	}
}

// TestRoundTripChecksPeer: a request goes only to the node it is
// addressed to. The agent at the address must present a certificate (of
// the mesh CA) with that node's name and, where an ID is given, a key
// that derives to it; otherwise RoundTrip fails before the request, with
// what it carries, is sent.
func TestRoundTripChecksPeer(t *testing.T) {
	ca := newTestCA(t)
	served := make(chan string, 8)
	handler := func(c *Config) {
		c.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served <- r.Header.Get("Authorization")
		})
	}
	server := startNode(t, ca, "server", "", nodeOpts{mutate: handler})
	impostor := startNode(t, ca, "impostor", "", nodeOpts{mutate: handler})
	nodeID := func(k ed25519.PublicKey) string { return hex.EncodeToString(k[:8]) }
	serverID := nodeID(server.key.Public().(ed25519.PublicKey))
	withIDs := startNode(t, ca, "client", "", nodeOpts{mutate: func(c *Config) { c.NodeID = nodeID }})
	withoutIDs := startNode(t, ca, "client2", "", nodeOpts{})
	for _, c := range []struct {
		name   string
		client *testNode
		to     Peer
		want   string // "" for served; else in the ErrWrongPeer error
	}{
		{"name", withoutIDs, Peer{Addr: server.Addr().String(), Name: "server"}, ""},
		{"name-and-id", withIDs, Peer{Addr: server.Addr().String(), Name: "server", ID: serverID}, ""},
		{"other-node-at-address", withoutIDs, Peer{Addr: impostor.Addr().String(), Name: "server"}, `presents a certificate for "impostor", not "server"`},
		{"other-node-claims-id", withIDs, Peer{Addr: impostor.Addr().String(), Name: "impostor", ID: serverID}, "not impostor's " + serverID},
		{"no-name", withoutIDs, Peer{Addr: server.Addr().String()}, "no node name given"},
		{"id-without-derivation", withoutIDs, Peer{Addr: server.Addr().String(), Name: "server", ID: serverID}, "Config.NodeID is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Connect checks the certificate as RoundTrip does, sending
			// nothing.
			if err := c.client.Connect(context.Background(), c.to); (c.want == "") != (err == nil) || (err != nil && (!errors.Is(err, ErrWrongPeer) || !strings.Contains(err.Error(), c.want))) {
				t.Errorf("Connect to %+v: %v; want %q", c.to, err, c.want)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://peer/v1/jobs/j/logs", nil)
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := c.client.RoundTrip(context.Background(), c.to, req)
			if c.want == "" {
				if err != nil {
					t.Fatalf("RoundTrip to %+v: %v", c.to, err)
				}
				resp.Body.Close()
				<-served
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("RoundTrip to %+v answered %d; want ErrWrongPeer", c.to, resp.StatusCode)
			}
			if !errors.Is(err, ErrWrongPeer) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("RoundTrip to %+v: %v; want ErrWrongPeer saying %q", c.to, err, c.want)
			}
		})
	}
	select {
	case auth := <-served:
		t.Errorf("a request reached a node it was not addressed to (carrying %q)", auth)
	default:
	}
}

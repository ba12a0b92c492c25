package dataplane

import (
	"context"
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
	addr := server.Addr().String()

	req, _ := http.NewRequest(http.MethodPost, "http://peer/v2/models/m/infer?x=1", strings.NewReader("hello"))
	req.Header.Set(HeaderPeer, "forged") // the server sets it from the certificate
	resp, err := client.RoundTrip(context.Background(), addr, req)
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
	resp, err = server.RoundTrip(context.Background(), client.Addr().String(), req)
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
	_, err := client.RoundTrip(ctx, server.Addr().String(), req)
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

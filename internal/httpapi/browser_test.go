package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// guarded is guard in front of a handler that answers 418, for an API
// bound to addr.
func guarded(tb testing.TB, addr string, allowed ...string) (http.Handler, *Server) {
	tb.Helper()
	s := &Server{hosts: newHostPolicy(func() string { return addr }, allowed), refused: newRefusedCounter(nil)}
	return s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusTeapot)
	})), s
}

// TestGuard: the Host, Origin and Content-Type rules, each case as a
// browser, curl or the CLI sends it.
func TestGuard(t *testing.T) {
	t.Parallel()
	const (
		ok       = http.StatusTeapot
		loopback = "127.0.0.1:7470"
		yaml     = "application/yaml"
		form     = "application/x-www-form-urlencoded"
		self     = "http://127.0.0.1:7470"
		attacker = "http://attacker.example"
	)
	type hdr = map[string]string
	cases := []struct {
		name, addr, method, path, host string
		allowed                        []string
		header                         hdr
		body                           string
		want                           int
		reason                         string // the refusal counted, if any
	}{
		// Host: DNS rebinding.
		{name: "loopback IP", addr: loopback, method: "GET", path: "/v1/nodes", host: "127.0.0.1:7470", want: ok},
		{name: "localhost", addr: loopback, method: "GET", path: "/v1/nodes", host: "localhost:7470", want: ok},
		{name: "localhost without port, upper case, trailing dot", addr: loopback, method: "GET", path: "/v1/nodes", host: "LOCALHOST.", want: ok},
		{name: "IPv6 loopback", addr: loopback, method: "GET", path: "/v1/nodes", host: "[::1]:7470", want: ok},
		{name: "other loopback IP", addr: loopback, method: "GET", path: "/v1/nodes", host: "127.0.0.2:7470", want: ok},
		{name: "no Host (HTTP/1.0)", addr: loopback, method: "GET", path: "/v1/nodes", host: "", want: ok},
		{name: "rebound name reads a blob", addr: loopback, method: "GET", path: "/v1/artifacts/blob", host: "attacker.example:7470", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "rebound name reads health", addr: loopback, method: "GET", path: "/v1/health", host: "attacker.example", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "rebound name applies (the finding)", addr: loopback, method: "POST", path: "/v1/policies", host: "attacker.example:7470",
			header: hdr{"Origin": "http://attacker.example:7470", "Content-Type": "text/plain"}, body: "kind: x", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "a LAN IP on a loopback API", addr: loopback, method: "GET", path: "/v1/nodes", host: "10.0.0.5:7470", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "bound IP", addr: "10.0.0.5:7470", method: "GET", path: "/v1/nodes", host: "10.0.0.5:7470", want: ok},
		{name: "another IP than the bound one", addr: "10.0.0.5:7470", method: "GET", path: "/v1/nodes", host: "10.0.0.6:7470", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "all interfaces: any IPv4", addr: "0.0.0.0:7470", method: "GET", path: "/v1/nodes", host: "192.168.1.9:7470", want: ok},
		{name: "all interfaces: any IPv6", addr: "[::]:7470", method: "GET", path: "/v1/nodes", host: "[2001:db8::9]:7470", want: ok},
		{name: "all interfaces: a name", addr: "0.0.0.0:7470", method: "GET", path: "/v1/nodes", host: "node1.corp:7470", want: http.StatusMisdirectedRequest, reason: RefusedHost},
		{name: "allowed name", addr: "0.0.0.0:7470", allowed: []string{"node1.corp"}, method: "GET", path: "/v1/nodes", host: "Node1.Corp.:7470", want: ok},
		{name: "allowed with a port: any port", addr: loopback, allowed: []string{"node1.corp:7470"}, method: "GET", path: "/v1/nodes", host: "node1.corp:80", want: ok},
		{name: "allowed IP", addr: loopback, allowed: []string{"203.0.113.7"}, method: "GET", path: "/v1/nodes", host: "203.0.113.7:7470", want: ok},
		{name: "a name not allowed", addr: "0.0.0.0:7470", allowed: []string{"node1.corp"}, method: "GET", path: "/v1/nodes", host: "node2.corp", want: http.StatusMisdirectedRequest, reason: RefusedHost},

		// Origin: CSRF.
		{name: "cross-origin apply", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": attacker, "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin text/plain apply", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": attacker, "Content-Type": "text/plain"}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin plan", addr: loopback, method: "POST", path: "/v1/plan", host: loopback,
			header: hdr{"Origin": attacker, "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin delete", addr: loopback, method: "DELETE", path: "/v1/policies/InferenceService/x", host: loopback,
			header: hdr{"Origin": attacker}, want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin pull without a body", addr: loopback, method: "POST", path: "/v1/artifacts/pull", host: loopback,
			header: hdr{"Origin": attacker}, want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin inference form", addr: loopback, method: "POST", path: "/v2/models/m/infer", host: loopback,
			header: hdr{"Origin": attacker, "Content-Type": form}, body: "{}", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "another port of localhost", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": "http://127.0.0.1:3000", "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "localhost page, 127.0.0.1 API", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": "http://localhost:7470", "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "null origin", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": "null", "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-site fetch without Origin", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Sec-Fetch-Site": "cross-site", "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "same-site fetch without Origin", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Sec-Fetch-Site": "same-site", "Content-Type": yaml}, body: "kind: x", want: http.StatusForbidden, reason: RefusedOrigin},
		{name: "cross-origin read: the page cannot read the answer", addr: loopback, method: "GET", path: "/v1/nodes", host: loopback,
			header: hdr{"Origin": attacker, "Sec-Fetch-Site": "cross-site"}, want: ok},
		{name: "same-origin apply (the dashboard)", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": self, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Content-Type": yaml}, body: "kind: x", want: ok},
		{name: "same-origin plan, JSON with charset", addr: loopback, method: "POST", path: "/v1/plan", host: loopback,
			header: hdr{"Origin": self, "Content-Type": "application/json; charset=utf-8"}, body: "{}", want: ok},
		{name: "same origin through a TLS proxy", addr: loopback, allowed: []string{"strata.corp"}, method: "POST", path: "/v1/policies", host: "strata.corp",
			header: hdr{"Origin": "https://strata.corp", "Content-Type": yaml}, body: "kind: x", want: ok},
		{name: "same-origin IPv6", addr: "[::1]:7470", method: "DELETE", path: "/v1/policies/InferenceService/x", host: "[::1]:7470",
			header: hdr{"Origin": "http://[::1]:7470"}, want: ok},

		// Content-Type: bodies any page can send without a preflight.
		{name: "same-origin text/plain", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": self, "Content-Type": "text/plain;charset=UTF-8"}, body: "kind: x", want: http.StatusUnsupportedMediaType, reason: RefusedContentType},
		{name: "same-origin form", addr: loopback, method: "POST", path: "/v2/models/m/infer", host: loopback,
			header: hdr{"Origin": self, "Content-Type": form}, body: "{}", want: http.StatusUnsupportedMediaType, reason: RefusedContentType},
		{name: "same-origin multipart", addr: loopback, method: "POST", path: "/v1/artifacts", host: loopback,
			header: hdr{"Origin": self, "Content-Type": "multipart/form-data; boundary=x"}, body: "--x--", want: http.StatusUnsupportedMediaType, reason: RefusedContentType},
		{name: "browser body without a type", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "no-cors"}, body: "kind: x", want: http.StatusUnsupportedMediaType, reason: RefusedContentType},
		{name: "same-origin text/plain with Strata-Client", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Origin": self, "Content-Type": "text/plain", api.HeaderClient: "ui"}, body: "kind: x", want: ok},
		{name: "same-origin pull without a body", addr: loopback, method: "POST", path: "/v1/artifacts/pull", host: loopback,
			header: hdr{"Origin": self}, want: ok},

		// Clients that are not browsers.
		{name: "curl -d inference", addr: loopback, method: "POST", path: "/v2/models/screening/infer", host: loopback,
			header: hdr{"Content-Type": form, "User-Agent": "curl/8.5.0"}, body: `{"inputs":[]}`, want: ok},
		{name: "curl -d inference off loopback", addr: "0.0.0.0:7470", method: "POST", path: "/v2/models/screening/infer", host: "10.0.0.5:7470",
			header: hdr{"Content-Type": form}, body: `{"inputs":[]}`, want: ok},
		{name: "curl --data-binary apply", addr: loopback, method: "POST", path: "/v1/policies", host: loopback,
			header: hdr{"Content-Type": form}, body: "kind: x", want: ok},
		{name: "CLI multipart push", addr: loopback, method: "POST", path: "/v1/artifacts", host: loopback,
			header: hdr{"Content-Type": "multipart/form-data; boundary=x", api.HeaderClient: client.ClientName}, body: "--x--", want: ok},
		{name: "a forwarding agent", addr: "0.0.0.0:7470", method: "POST", path: "/v2/models/m/infer", host: "10.0.0.6:7470",
			header: hdr{"Content-Type": "application/json", "Strata-Forwarded-By": "edge-1"}, body: "{}", want: ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, s := guarded(t, tc.addr, tc.allowed...)
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body == "" {
				req = httptest.NewRequest(tc.method, tc.path, nil)
			}
			req.Host = tc.host
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%s %s Host %q %v = %d, want %d: %s", tc.method, tc.path, tc.host, tc.header, rec.Code, tc.want, rec.Body)
			}
			for k := range rec.Header() {
				if strings.HasPrefix(k, "Access-Control-") {
					t.Errorf("CORS header %s sent", k)
				}
			}
			for _, reason := range []string{RefusedHost, RefusedOrigin, RefusedContentType} {
				want := 0.0
				if reason == tc.reason {
					want = 1
				}
				if got := refusedCount(t, s, reason); got != want {
					t.Errorf("refused{reason=%q} = %v, want %v", reason, got, want)
				}
			}
			if tc.want == ok {
				return
			}
			var e apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("refusal is not a JSON error: %v: %s", err, rec.Body)
			}
			if tc.reason == RefusedHost && !strings.Contains(e.Error, "api_allowed_hosts") {
				t.Errorf("the refusal does not say how to allow the host: %s", e.Error)
			}
		})
	}
}

// TestGuardLetsTheClientIn: every kind of call api/client makes passes the
// guard of a real server: writes with YAML, JSON, raw and multipart
// bodies, a delete, reads.
func TestGuardLetsTheClientIn(t *testing.T) {
	t.Parallel()
	var guard http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { guard.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	s := &Server{hosts: newHostPolicy(srv.Listener.Addr().String, nil), refused: newRefusedCounter(prometheus.NewRegistry())}
	guard = s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet && r.URL.Path == "/v1/nodes" {
			_, _ = io.WriteString(w, "[]")
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	ctx := context.Background()
	for _, addr := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		c := client.New(addr)
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"nodes", func() error { _, err := c.Nodes(ctx, client.NodeFilter{}); return err }},
			{"apply", func() error { _, err := c.Apply(ctx, "x.yaml", []byte("kind: x\n")); return wrongShape(err) }},
			{"plan", func() error { _, err := c.Plan(ctx, "x.yaml", []byte("kind: x\n"), ""); return wrongShape(err) }},
			{"delete", func() error { return c.DeletePolicy(ctx, "InferenceService", "x") }},
			{"pull", func() error { _, err := c.Pull(ctx, "", "m", ""); return err }},
			{"push", func() error {
				_, err := c.Push(ctx, client.PushSpec{Name: "m", Version: "1"}, bytes.NewReader([]byte("onnx")), 4)
				return err
			}},
			{"push with a reference (multipart)", func() error {
				_, err := c.Push(ctx, client.PushSpec{Name: "m", Version: "1", Reference: []byte("{}")}, bytes.NewReader([]byte("onnx")), -1)
				return err
			}},
		} {
			t.Run(addr+"/"+tc.name, func(t *testing.T) {
				if err := tc.call(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	for _, reason := range []string{RefusedHost, RefusedOrigin, RefusedContentType} {
		if got := refusedCount(t, s, reason); got != 0 {
			t.Errorf("refused{reason=%q} = %v", reason, got)
		}
	}
}

// wrongShape ignores an answer that does not decode ({} for a list): only
// whether the call was let through matters here.
func wrongShape(err error) error {
	var ae *client.Error
	if err != nil && !errors.As(err, &ae) {
		return nil
	}
	return err
}

// refusedCount reads strata_api_requests_refused_total{reason}.
func refusedCount(tb testing.TB, s *Server, reason string) float64 {
	tb.Helper()
	var m dto.Metric
	if err := s.refused.WithLabelValues(reason).Write(&m); err != nil {
		tb.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestHandlerIsGuarded: the handler New builds puts the guard in front of
// every route, anonymous ones and the token check included.
func TestHandlerIsGuarded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := New(Config{Events: http.NotFoundHandler(), Registry: reg, Registerer: reg, Addr: func() string { return "127.0.0.1:7470" }}).Handler()
	for _, tc := range []struct {
		name, method, path, host, origin string
		want                             int
	}{
		{"foreign host, anonymous path", "GET", "/metrics", "attacker.example:7470", "", http.StatusMisdirectedRequest},
		{"foreign host, dashboard", "GET", "/ui/", "attacker.example:7470", "", http.StatusMisdirectedRequest},
		{"foreign origin write", "POST", "/v1/policies", "127.0.0.1:7470", "http://attacker.example", http.StatusForbidden},
		{"same origin reaches the routes", "POST", "/v1/nodes", "127.0.0.1:7470", "http://127.0.0.1:7470", http.StatusMethodNotAllowed},
		{"metrics", "GET", "/metrics", "localhost:7470", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Host = tc.host
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%s %s = %d, want %d: %.300s", tc.method, tc.path, rec.Code, tc.want, rec.Body)
			}
		})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "strata_api_requests_refused_total"
	}
	if !found {
		t.Error("strata_api_requests_refused_total is not registered")
	}
}

// TestGuardDropsThePeerHeader: a client of the API cannot pass as a peer
// of the data plane, which alone names one (dataplane.HeaderPeer): the
// header is gone before any handler reads it.
func TestGuardDropsThePeerHeader(t *testing.T) {
	t.Parallel()
	s := &Server{hosts: newHostPolicy(func() string { return "127.0.0.1:7470" }, nil), refused: newRefusedCounter(nil)}
	var got []string
	h := s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Values(dataplane.HeaderPeer)
	}))
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		r := httptest.NewRequest(method, "http://127.0.0.1:7470/v2/models/m/infer", nil)
		r.Header.Add(dataplane.HeaderPeer, "cloud-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
		if len(got) != 0 {
			t.Errorf("%s: the handler read %s %q", method, dataplane.HeaderPeer, got)
		}
	}
}

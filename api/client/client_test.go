package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

// serve starts an agent stand-in that answers every request with h and
// returns a client of it.
func serve(tb testing.TB, h http.HandlerFunc, opts ...client.Option) *client.Client {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return client.New(srv.URL, opts...)
}

func answer(code int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func TestNodes(t *testing.T) {
	tests := []struct {
		name    string
		h       http.HandlerFunc
		want    []api.Node
		wantErr *client.Error
	}{
		{
			name: "success",
			h: answer(http.StatusOK, "application/json", `[{"id":"n1","name":"edge-1","tier":"edge","site":"edge-a",
				"capabilities":{"cpu":{"cores":4,"millicores":4000},"gpus":[{"index":0,"model":"L4","memory":24000000000}]},
				"status":"alive","future_field":1}]`),
			want: []api.Node{{ID: "n1", Name: "edge-1", Tier: "edge", Site: "edge-a", Status: api.StatusAlive,
				Capabilities: api.Capabilities{CPU: api.CPU{Cores: 4, Millicores: 4000}, GPUs: []api.GPU{{Model: "L4", Memory: 24e9}}}}},
		},
		{
			name:    "4xx JSON error",
			h:       answer(http.StatusBadRequest, "application/json", `{"error":"tier \"x\" is not a tier: use edge, onprem or cloud","field":"tier"}`),
			wantErr: &client.Error{Status: 400, Message: `tier "x" is not a tier: use edge, onprem or cloud`, Field: "tier", JSON: true},
		},
		{
			name:    "non-JSON 5xx",
			h:       answer(http.StatusBadGateway, "text/html", "<html>bad gateway</html>\n"),
			wantErr: &client.Error{Status: 502, Message: "<html>bad gateway</html>"},
		},
		{
			name:    "JSON 5xx without an error field",
			h:       answer(http.StatusInternalServerError, "application/json", `{"oops":true}`),
			wantErr: &client.Error{Status: 500, Message: `{"oops":true}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, tt.h)
			got, err := c.Nodes(context.Background(), client.NodeFilter{})
			if tt.wantErr != nil {
				var ae *client.Error
				if !errors.As(err, &ae) {
					t.Fatalf("err = %v (%T), want a *client.Error", err, err)
				}
				if diff := cmp.Diff(tt.wantErr, ae); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  *client.Error
		want string
	}{
		{"api error", &client.Error{Status: 404, Message: "no node named x", JSON: true}, "no node named x (HTTP 404)"},
		{"other body", &client.Error{Status: 502, Message: "bad gateway"}, "HTTP 502: bad gateway"},
		{"policy problems", &client.Error{Status: 400, JSON: true, Problems: []api.PolicyError{
			{File: "a.yaml", Line: 5, Column: 12, Field: "spec.retries", Message: "unknown field"},
			{File: "a.yaml", Line: 6, Column: 3, Field: "spec.gang", Message: "want a mapping"},
		}}, "the policy has 2 error(s):\na.yaml:5:12: spec.retries: unknown field\na.yaml:6:3: spec.gang: want a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRequests(t *testing.T) {
	type seen struct {
		Method, Path, Query, ContentType, Auth, Body string
	}
	tests := []struct {
		name string
		call func(ctx context.Context, c *client.Client) error
		want seen
	}{
		{"nodes filter", func(ctx context.Context, c *client.Client) error {
			_, err := c.Nodes(ctx, client.NodeFilter{Tier: "edge", Site: "a", Labels: []string{"k=v", "x=y"}})
			return err
		}, seen{Method: "GET", Path: "/v1/nodes", Query: "label=k%3Dv&label=x%3Dy&site=a&tier=edge", Auth: "Bearer tok"}},
		{"node escapes", func(ctx context.Context, c *client.Client) error {
			_, err := c.Node(ctx, "a/b")
			return err
		}, seen{Method: "GET", Path: "/v1/nodes/a%2Fb", Auth: "Bearer tok"}},
		{"rtt from self", func(ctx context.Context, c *client.Client) error {
			_, err := c.RTT(ctx, "", "edge-1")
			return err
		}, seen{Method: "GET", Path: "/v1/rtt", Query: "to=edge-1", Auth: "Bearer tok"}},
		{"apply", func(ctx context.Context, c *client.Client) error {
			_, err := c.Apply(ctx, "svc.yaml", []byte("kind: X\n"))
			return err
		}, seen{Method: "POST", Path: "/v1/policies", Query: "file=svc.yaml", ContentType: "application/yaml", Auth: "Bearer tok", Body: "kind: X\n"}},
		{"plan why", func(ctx context.Context, c *client.Client) error {
			_, err := c.Plan(ctx, "svc.yaml", []byte("kind: X\n"), "gpu-1")
			return err
		}, seen{Method: "POST", Path: "/v1/plan", Query: "file=svc.yaml&why=gpu-1", ContentType: "application/yaml", Auth: "Bearer tok", Body: "kind: X\n"}},
		{"delete", func(ctx context.Context, c *client.Client) error {
			return c.DeletePolicy(ctx, "InferenceService", "fraud")
		}, seen{Method: "DELETE", Path: "/v1/policies/InferenceService/fraud", Auth: "Bearer tok"}},
		{"pull newest dataset", func(ctx context.Context, c *client.Client) error {
			_, err := c.Pull(ctx, api.KindDataset, "cases", "")
			return err
		}, seen{Method: "POST", Path: "/v1/artifacts/pull", Query: "kind=dataset&name=cases", Auth: "Bearer tok"}},
		{"push", func(ctx context.Context, c *client.Client) error {
			_, err := c.Push(ctx, client.PushSpec{Name: "m", Version: "1"}, strings.NewReader("onnx"), 4)
			return err
		}, seen{Method: "POST", Path: "/v1/artifacts", Query: "kind=model&name=m&version=1", ContentType: "application/octet-stream", Auth: "Bearer tok", Body: "onnx"}},
		{"drift of a model", func(ctx context.Context, c *client.Client) error {
			_, err := c.Drift(ctx, "screening")
			return err
		}, seen{Method: "GET", Path: "/v1/drift", Query: "model=screening", Auth: "Bearer tok"}},
		{"job logs", func(ctx context.Context, c *client.Client) error {
			_, err := c.JobLogs(ctx, "train-1", 2)
			return err
		}, seen{Method: "GET", Path: "/v1/jobs/train-1/logs", Query: "rank=2", Auth: "Bearer tok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got seen
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got = seen{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, ContentType: r.Header.Get("Content-Type"),
					Auth: r.Header.Get("Authorization"), Body: string(b)}
				if h := r.Header.Get(api.HeaderClient); h != client.ClientName {
					t.Errorf("%s = %q, want %q", api.HeaderClient, h, client.ClientName)
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, "{}")
			}, client.WithToken("tok"))
			if err := tt.call(context.Background(), c); err != nil {
				// Answers of the wrong shape ({} for a list) do not matter
				// here; only the request does.
				var ae *client.Error
				if errors.As(err, &ae) {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPushReference(t *testing.T) {
	parts := map[string]string{}
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/form-data" {
			http.Error(w, "want multipart", http.StatusBadRequest)
			return
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			parts[p.FormName()] = string(b)
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"kind":"model","name":"m","version":"2","digest":"abc","size":4,"signer":"k1"}`)
	})
	var raw []byte
	m, err := c.Push(context.Background(), client.PushSpec{Name: "m", Version: "2", Reference: []byte(`{"features":[]}`)},
		strings.NewReader("onnx"), -1, client.Body(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"reference": `{"features":[]}`, "file": "onnx"}, parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if m.Ref() != "model/m@2" || m.Digest != "abc" || m.Signer != "k1" {
		t.Errorf("manifest = %+v", m)
	}
	if !strings.Contains(string(raw), `"digest":"abc"`) {
		t.Errorf("Body kept %q", raw)
	}
}

func TestContextCancel(t *testing.T) {
	release := make(chan struct{})
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := c.Members(ctx)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var ae *client.Error
			if errors.As(err, &ae) {
				t.Errorf("a cancelled call is not an API error: %v", ae)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	_, err := client.New(addr).Health(context.Background())
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v (%T), want a *url.Error", err, err)
	}
}

func TestBodyKeepsJSON(t *testing.T) {
	const body = "[\n  {\n    \"name\": \"a\",\n    \"status\": \"alive\"\n  }\n]\n"
	c := serve(t, answer(http.StatusOK, "application/json", body))
	var raw []byte
	ms, err := c.Members(context.Background(), client.Body(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != body || len(ms) != 1 || ms[0].Status != api.StatusAlive {
		t.Errorf("raw %q, members %+v", raw, ms)
	}
}

func TestEvents(t *testing.T) {
	var since string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		since = r.URL.Query().Get("since")
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, ": keep-alive\n\ndata: {\"seq\":%d,\"type\":\"drift.alarm\",\"message\":\"m%d\"}\n\n", i, i)
		}
		io.WriteString(w, "data: not json\n\n")
	})
	s, err := c.Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []uint64
	for s.Next() {
		got = append(got, s.Event().Seq)
		if want := fmt.Sprintf(`{"seq":%d,"type":"drift.alarm","message":"m%d"}`, s.Event().Seq, s.Event().Seq); string(s.Raw()) != want {
			t.Errorf("Raw() = %s, want %s", s.Raw(), want)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if since != "0" {
		t.Errorf("since = %q, want 0", since)
	}
}

// TestEventsCountsUndecoded: data lines that are not an event are skipped
// and counted; comments and keep-alives are not counted.
func TestEventsCountsUndecoded(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": keep-alive\n\ndata: not json\n\ndata: {\"seq\":1,\"type\":\"x\"}\n\ndata: {\"seq\":\"two\"}\n\nevent: ping\n\n")
	})
	s, err := c.Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []uint64
	for s.Next() {
		if n := s.Undecoded(); n != 1 {
			t.Errorf("Undecoded() at event %d = %d, want 1", s.Event().Seq, n)
		}
		got = append(got, s.Event().Seq)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if n := s.Undecoded(); n != 2 {
		t.Errorf("Undecoded() = %d, want 2", n)
	}
}

func TestEventsError(t *testing.T) {
	c := serve(t, answer(http.StatusBadRequest, "application/json", `{"error":"since=\"x\": want an event sequence number","field":"since"}`))
	_, err := c.Events(context.Background(), 5)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Field != "since" || ae.Status != 400 {
		t.Fatalf("err = %v, want a 400 about since", err)
	}
}

// TestNotAnAgent: an address where something else answers (a web page, a
// service that is not strata's) is a *NotAgentError naming the address
// and what answered, for a plain call and for the event stream; a
// gateway's 5xx page stays an *Error.
func TestNotAnAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		ct   string
	}{
		{"web page", answer(http.StatusOK, "text/html; charset=utf-8", "<!doctype html><title>router</title>"), "text/html"},
		{"404 page", answer(http.StatusNotFound, "text/html", "<html>not found</html>"), "text/html"},
		{"plain text", answer(http.StatusOK, "text/plain", "hello"), "text/plain"},
		{"no content type", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "SSH-2.0-OpenSSH\r\n")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := serve(t, tc.h)
			_, err := c.Nodes(context.Background(), client.NodeFilter{})
			var nae *client.NotAgentError
			if !errors.As(err, &nae) || nae.ContentType != tc.ct || nae.URL != c.Addr() {
				t.Fatalf("err = %v (%T), want a *NotAgentError for %s at %s", err, err, tc.ct, c.Addr())
			}
			if !strings.Contains(err.Error(), "not a strata agent's API") {
				t.Errorf("error %q does not say what is wrong", err)
			}
		})
	}
	c := serve(t, answer(http.StatusOK, "text/html", "<html></html>"))
	var nae *client.NotAgentError
	if _, err := c.Events(context.Background(), 0); !errors.As(err, &nae) {
		t.Errorf("events from a web page: err = %v, want a *NotAgentError", err)
	}
}

package agent

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/api/client"
)

// TestServedAPIIsGuarded: the API as the agent serves it (its listener,
// not Handler) refuses a Host it does not answer to and a cross-origin
// write, takes the CLI's client, and exports the refusals and the
// connection limiter's metrics.
func TestServedAPIIsGuarded(t *testing.T) {
	a := devMesh(t, 1)[0]
	base := "http://" + a.APIAddr()
	do := func(method, path, host, origin, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Content-Type", "text/plain")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, method, path, host, origin string
		want                             int
	}{
		{"rebound name", "GET", "/v1/health", "attacker.example:7470", "", http.StatusMisdirectedRequest},
		{"cross-origin apply", "POST", "/v1/policies", "", "http://attacker.example", http.StatusForbidden},
		{"localhost", "GET", "/v1/health", "localhost", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(tc.method, tc.path, tc.host, tc.origin, "kind: x"); got != tc.want {
				t.Errorf("%s %s Host %q Origin %q = %d, want %d", tc.method, tc.path, tc.host, tc.origin, got, tc.want)
			}
		})
	}
	if _, err := client.New(base).Health(context.Background()); err != nil {
		t.Fatalf("the CLI's client: %v", err)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`strata_api_requests_refused_total{reason="host"} 1`,
		`strata_api_requests_refused_total{reason="origin"} 1`,
		"strata_api_connections_open ",
		`strata_api_connections_refused_total{reason="per_client"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestAllowedHosts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configured []string
		advertised string
		want       []string
	}{
		{"nothing", nil, "", nil},
		{"loopback API: not advertised", []string{"node1.corp"}, "", []string{"node1.corp"}},
		{"advertised IP", nil, "10.0.0.7:7470", []string{"10.0.0.7"}},
		{"advertised name", []string{"a.corp"}, "node1.corp:7470", []string{"a.corp", "node1.corp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowedHosts(tc.configured, tc.advertised); !slices.Equal(got, tc.want) {
				t.Errorf("allowedHosts(%q, %q) = %q, want %q", tc.configured, tc.advertised, got, tc.want)
			}
		})
	}
}

package agent

import (
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestReload: labels, the log level and the API's tokens change in a
// running agent; every other changed setting is reported as needing a
// restart and left as it was; a configuration that does not validate
// changes nothing.
func TestReload(t *testing.T) {
	a := devMesh(t, 1)[0]
	h := a.Handler()
	write := func(token string) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/policies", strings.NewReader(""))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := write(""); code != http.StatusBadRequest {
		t.Fatalf("a write on a loopback API with no tokens: %d, want 400 (an empty policy)", code)
	}

	next := a.cfg
	next.Labels = map[string]string{"dev": "true", "city": "nantes"}
	next.LogLevel = "debug"
	next.APIToken = "s3cret"
	next.Tier = "cloud"
	r, err := a.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"labels", "log_level", "api_token"}; !slices.Equal(r.Applied, want) {
		t.Errorf("applied %v, want %v", r.Applied, want)
	}
	if want := []string{"tier"}; !slices.Equal(r.NeedRestart, want) {
		t.Errorf("need restart %v, want %v", r.NeedRestart, want)
	}
	if got := a.Mesh().Local().Labels; !maps.Equal(got, next.Labels) {
		t.Errorf("the node's labels are %v, want %v", got, next.Labels)
	}
	if got := a.Mesh().Local().Tier; got == "cloud" {
		t.Error("the tier changed without a restart")
	}
	if !a.log.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("the log level is not debug")
	}
	if code := write(""); code != http.StatusUnauthorized {
		t.Errorf("a write without the new token: %d, want 401", code)
	}
	if code := write("s3cret"); code != http.StatusBadRequest {
		t.Errorf("a write with the new token: %d, want 400 (an empty policy)", code)
	}

	bad := next
	bad.Labels = map[string]string{"x": "y"}
	bad.LogLevel = "loud"
	if _, err := a.Reload(bad); err == nil {
		t.Fatal("a config with log_level loud reloaded")
	}
	if got := a.Mesh().Local().Labels; !maps.Equal(got, next.Labels) {
		t.Errorf("a failed reload changed the labels to %v", got)
	}
	_, metrics := get(t, h, "/metrics")
	for _, want := range []string{`strata_config_reloads_total{result="ok"} 1`, `strata_config_reloads_total{result="error"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "strata_config_"))
		}
	}

	// Nothing changed: nothing applied, nothing to restart for but the
	// tier still.
	r, err = a.Reload(next)
	if err != nil || len(r.Applied) != 0 || !slices.Equal(r.NeedRestart, []string{"tier"}) {
		t.Errorf("reload of the same config: %+v, %v", r, err)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestAgentReloadsOnSIGHUP: an agent process given SIGHUP (systemctl
// reload) reads its config file again and applies the new labels and the
// new token from api_token_file without a restart; a config that does not
// parse leaves the running one in force, and the agent goes on.
func TestAgentReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	cfg, token := filepath.Join(dir, "agent.yaml"), filepath.Join(dir, "api-token")
	config := func(city string) {
		t.Helper()
		body := fmt.Sprintf("labels: {city: %s}\napi_token_file: %s\n", city, token)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config("lyon")
	os.WriteFile(token, []byte("one\n"), 0o600)
	p := &proc{name: "r1", dir: filepath.Join(dir, "data"), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)), args: []string{"-config", cfg}}
	startAgent(t, p)
	city := func() string {
		out, err := cli(t, p.api, "node", "r1", "-o", "json")
		var n struct {
			Labels map[string]string `json:"labels"`
		}
		if err != nil || json.Unmarshal([]byte(out), &n) != nil {
			return ""
		}
		return n.Labels["city"]
	}
	write := func(tok string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.api+"/v1/policies", strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	meshtest.WaitFor(t, 20*time.Second, "the agent up with its labels", func() bool { return city() == "lyon" })
	if code := write("one"); code != http.StatusBadRequest {
		t.Fatalf("a write with the configured token: %d, want 400 (an empty policy)", code)
	}

	config("nantes")
	os.WriteFile(token, []byte("two\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	meshtest.WaitFor(t, 20*time.Second, "the new labels", func() bool { return city() == "nantes" })
	if code := write("one"); code != http.StatusUnauthorized {
		t.Errorf("a write with the old token after the reload: %d, want 401", code)
	}
	if code := write("two"); code != http.StatusBadRequest {
		t.Errorf("a write with the new token after the reload: %d, want 400", code)
	}

	// A config that does not parse changes nothing; the next good one is
	// applied.
	os.WriteFile(cfg, []byte("labels: [\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	meshtest.WaitFor(t, 20*time.Second, "the failed reload counted", func() bool {
		resp, err := http.Get("http://" + p.api + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `strata_config_reloads_total{result="error"} 1`) &&
			strings.Contains(string(b), `strata_config_reloads_total{result="ok"} 1`)
	})
	if city() != "nantes" {
		t.Errorf("the labels changed after a config that does not parse: city %q", city())
	}
	config("brest")
	p.cmd.Process.Signal(syscall.SIGHUP)
	meshtest.WaitFor(t, 20*time.Second, "the labels after a bad config and a good one", func() bool { return city() == "brest" })
	if p.cmd.ProcessState != nil {
		t.Fatalf("the agent exited: %v\n%s", p.cmd.ProcessState, p.log)
	}
}

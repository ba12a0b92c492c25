package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestForwardOverTheDataPlaneOnly sends a request from one agent to
// another as the forwarder does, over the real data plane: it arrives
// without the caller's credentials, from the authenticated sending agent;
// addressed to a node whose data address another agent answers, it is
// refused before anything is sent.
func TestForwardOverTheDataPlaneOnly(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 3, func(c *Config) { c.PKI = keys })
	from, to, other := agents[0], agents[1], agents[2]
	seen := make(chan http.Header, 4)
	var echo http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	to.peer.Store(&echo)
	other.peer.Store(&echo)
	node := func(a *Agent) mesh.Node {
		t.Helper()
		var n mesh.Node
		meshtest.WaitFor(t, 15*time.Second, a.Name()+"'s data address at "+from.Name(), func() bool {
			n, err = from.mesh.Node(a.Name())
			return err == nil && n.Addrs.Data != ""
		})
		return n
	}
	target := node(to)
	header := http.Header{"Authorization": {"Bearer s3cret"}, "Cookie": {"s=s3cret"}, "Proxy-Authorization": {"Basic czNjcmV0"}, "Accept": {"text/plain"}}

	resp, err := from.fwd.Send(context.Background(), target, http.MethodGet, "/v1/jobs/j/logs", header, nil)
	if err != nil {
		t.Fatalf("Send to %s: %v", target.Name, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got := <-seen
	for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
		if v := got.Values(h); len(v) > 0 {
			t.Errorf("%s received %s: %q", to.Name(), h, v)
		}
	}
	if got.Get(dataplane.HeaderPeer) != from.Name() || got.Get(serving.HeaderForwarded) != from.Name() || got.Get("Accept") != "text/plain" {
		t.Errorf("%s received headers %v; want the peer and forwarder named %s, Accept kept", to.Name(), got, from.Name())
	}

	// A document that points to's name at other's data address (an
	// address that changed hands, or a forged document): other's
	// certificate names other, so nothing is sent.
	forged := target
	forged.Addrs.Data = node(other).Addrs.Data
	if resp, err := from.fwd.Send(context.Background(), forged, http.MethodGet, "/v1/jobs/j/logs", header, nil); !errors.Is(err, dataplane.ErrWrongPeer) {
		if err == nil {
			resp.Body.Close()
		}
		t.Fatalf("Send to %s at %s's address: %v; want ErrWrongPeer", to.Name(), other.Name(), err)
	}
	select {
	case h := <-seen:
		t.Errorf("a request reached the agent it was not addressed to, with headers %v", h)
	default:
	}
}

// TestForwardWithoutACA: in a mesh without a CA there is no data plane,
// and a job's log on another node is not fetched from that node's API
// (with the caller's token) but refused, saying what is missing.
func TestForwardWithoutACA(t *testing.T) {
	agents := devMesh(t, 2)
	if _, err := agents[0].cat.Jobs.Put(catalog.Job{Name: "j", Key: "TrainingJob/j", State: catalog.JobRunning, Node: agents[1].Name(), Nodes: []string{agents[1].Name()}}); err != nil {
		t.Fatal(err)
	}
	code, raw := get(t, agents[0].Handler(), "/v1/jobs/j/logs")
	var body struct{ Error string }
	if code != http.StatusBadGateway || json.Unmarshal(raw, &body) != nil ||
		!strings.Contains(body.Error, "forwarding needs the data plane (mesh CA): this agent has none, so it cannot send to "+agents[1].Name()) {
		t.Errorf("GET /v1/jobs/j/logs of a job on %s = %d %s; want 502 saying forwarding needs the data plane", agents[1].Name(), code, raw)
	}
}

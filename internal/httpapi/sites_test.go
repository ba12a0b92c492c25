package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/mesh"
)

// sitesMesh is a Mesh of fixed nodes whose RTTs come from a table (ms
// between node IDs; a missing entry is a node with no coordinate yet).
type sitesMesh struct {
	self  string
	nodes []mesh.Node
	rtt   map[string]float64
}

func (m sitesMesh) ID() string   { return m.self }
func (m sitesMesh) Name() string { return m.self }
func (m sitesMesh) Members() []mesh.Member {
	var out []mesh.Member
	for _, n := range m.nodes {
		out = append(out, mesh.Member{Name: n.Name, ID: n.ID, Status: n.Status, Tier: n.Tier, Site: n.Site})
	}
	return out
}
func (m sitesMesh) Nodes() []mesh.Node { return m.nodes }
func (m sitesMesh) Node(nameOrID string) (mesh.Node, error) {
	for _, n := range m.nodes {
		if n.ID == nameOrID || n.Name == nameOrID {
			return n, nil
		}
	}
	return mesh.Node{}, mesh.ErrUnknownNode
}
func (m sitesMesh) RTT(a, b string) (time.Duration, error) {
	if a == b {
		return 0, nil
	}
	ms, ok := m.rtt[b]
	if !ok {
		return 0, fmt.Errorf("%w %q", mesh.ErrNoCoordinate, b)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// TestPoolSites: GET /v1/sites gives the sites of this agent's own pool an
// RTT (to the site's nearest alive node, 0 for its own site) and a time
// heard (the answer's, while a node of the site is alive), so that they do
// not read as unknown next to the federation's sites, which have both.
func TestPoolSites(t *testing.T) {
	t.Parallel()
	node := func(id, site string, st mesh.Status) mesh.Node {
		n := mesh.Node{Status: st}
		n.ID, n.Name, n.Site = id, id, site
		return n
	}
	fm := sitesMesh{
		self: "a1",
		nodes: []mesh.Node{
			node("a1", "edge-a", mesh.StatusAlive),
			node("a2", "edge-a", mesh.StatusAlive),
			node("b1", "edge-b", mesh.StatusAlive),
			node("b2", "edge-b", mesh.StatusAlive),
			node("b3", "edge-b", mesh.StatusFailed), // nearest, but failed
			node("c1", "cloud", mesh.StatusSuspect), // reachable, not heard from lately
			node("d1", "dc", mesh.StatusFailed),     // unreachable
			node("e1", "rack", mesh.StatusAlive),    // no coordinate yet
		},
		rtt: map[string]float64{"a2": 0.4, "b1": 90, "b2": 85.5, "b3": 20, "c1": 30, "d1": 40},
	}
	heard := time.Now().Add(-10 * time.Second).UTC()
	remoteRTT := 60.0
	s := &Server{cfg: Config{Mesh: fm, RemoteSites: func() []mesh.Site {
		return []mesh.Site{{Name: "far", Nodes: 3, Alive: 3, Status: mesh.SiteReachable, Via: mesh.ViaFederation, Heard: &heard, RTTMillis: &remoteRTT}}
	}}}
	before := time.Now()
	rec := httptest.NewRecorder()
	s.handleSites(rec, httptest.NewRequest(http.MethodGet, "/v1/sites", nil))
	after := time.Now()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/sites: %d %s", rec.Code, rec.Body)
	}
	var sites []api.Site
	if err := json.Unmarshal(rec.Body.Bytes(), &sites); err != nil {
		t.Fatal(err)
	}
	by := map[string]api.Site{}
	for _, st := range sites {
		by[st.Name] = st
	}
	rtt := func(st api.Site) string {
		if st.RTTMillis == nil {
			return "none"
		}
		return fmt.Sprint(*st.RTTMillis)
	}
	for _, tc := range []struct {
		site, status, via, rtt string
		heard                  bool
	}{
		{"edge-a", api.SiteReachable, api.ViaPool, "0", true}, // this agent's own site
		{"edge-b", api.SiteReachable, api.ViaPool, "85.5", true},
		{"cloud", api.SiteReachable, api.ViaPool, "none", false},
		{"dc", api.SiteUnreachable, api.ViaPool, "none", false},
		{"rack", api.SiteReachable, api.ViaPool, "none", true},
		{"far", api.SiteReachable, api.ViaFederation, "60", true},
	} {
		st, ok := by[tc.site]
		if !ok {
			t.Errorf("%s: not listed in %+v", tc.site, sites)
			continue
		}
		if st.Status != tc.status || st.Via != tc.via || rtt(st) != tc.rtt || (st.Heard != nil) != tc.heard {
			t.Errorf("%s: status %s via %s, rtt %s, heard %v; want %s via %s, rtt %s, heard %v", tc.site, st.Status, st.Via, rtt(st), st.Heard, tc.status, tc.via, tc.rtt, tc.heard)
		}
	}
	if h := by["edge-b"].Heard; h != nil && (h.Before(before.Add(-time.Second)) || h.After(after.Add(time.Second))) {
		t.Errorf("edge-b heard at %v, want the time of the answer (%v)", h, before)
	}
	if h := by["far"].Heard; h == nil || !h.Equal(heard) {
		t.Errorf("far heard at %v, want its summary's %v", h, heard)
	}
}

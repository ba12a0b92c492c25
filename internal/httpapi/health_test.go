package httpapi

import (
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/mesh"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	m := func(id, site string, st mesh.Status) mesh.Member {
		return mesh.Member{Name: id, ID: id, Site: site, Status: st}
	}
	self := m("me", "edge-a", mesh.StatusAlive)
	for _, tc := range []struct {
		name    string
		members []mesh.Member
		status  string
		reason  string
		alive   int
	}{
		{"only node", []mesh.Member{self}, "ok", "", 1},
		{"peers alive", []mesh.Member{self, m("p", "edge-a", mesh.StatusAlive), m("q", "dc", mesh.StatusSuspect)}, "ok", "", 3},
		{"peers left", []mesh.Member{self, m("p", "edge-a", mesh.StatusLeft)}, "ok", "", 1},
		{"alone", []mesh.Member{self, m("p", "edge-a", mesh.StatusFailed), m("q", "dc", mesh.StatusUnknown)}, "degraded", "alone: none of the 2 other known members", 1},
		{"site cut off", []mesh.Member{self, m("p", "edge-a", mesh.StatusAlive), m("q", "dc", mesh.StatusFailed), m("r", "cloud", mesh.StatusFailed)}, "degraded", "site edge-a is cut off: no member of cloud, dc is reachable", 2},
		{"one other site lost", []mesh.Member{self, m("q", "dc", mesh.StatusAlive), m("r", "cloud", mesh.StatusFailed)}, "ok", "", 2},
	} {
		h := health("me", tc.members)
		if h.Status != tc.status || h.AliveMembers != tc.alive || (tc.reason != "" && !slices.ContainsFunc(h.Reasons, func(r string) bool { return strings.Contains(r, tc.reason) })) || (tc.reason == "" && len(h.Reasons) > 0) {
			t.Errorf("%s: %+v, want status %s, %d alive, reason %q", tc.name, h, tc.status, tc.alive, tc.reason)
		}
	}
}

// TestFederatedHealth: a federated agent is degraded when every other site
// it knows is unheard of, not when only some are.
func TestFederatedHealth(t *testing.T) {
	t.Parallel()
	site := func(name string, st mesh.SiteStatus) mesh.Site {
		return mesh.Site{Name: name, Status: st, Via: mesh.ViaFederation}
	}
	for _, tc := range []struct {
		name    string
		remotes []mesh.Site
		status  string
	}{
		{"no other site", nil, "ok"},
		{"all heard", []mesh.Site{site("a", mesh.SiteReachable), site("b", mesh.SiteReachable)}, "ok"},
		{"one unheard", []mesh.Site{site("a", mesh.SiteReachable), site("b", mesh.SiteUnreachable)}, "ok"},
		{"all unheard", []mesh.Site{site("a", mesh.SiteUnreachable), site("b", mesh.SiteUnreachable)}, "degraded"},
	} {
		h := health("me", []mesh.Member{{Name: "me", ID: "me", Site: "s", Status: mesh.StatusAlive}})
		federatedHealth(&h, tc.remotes)
		if h.Status != tc.status {
			t.Errorf("%s: %+v, want %s", tc.name, h, tc.status)
		}
		if tc.status == "degraded" && !slices.ContainsFunc(h.Reasons, func(r string) bool { return strings.Contains(r, "cut off from the federation: no summary from a, b") }) {
			t.Errorf("%s: reasons %q", tc.name, h.Reasons)
		}
	}
}

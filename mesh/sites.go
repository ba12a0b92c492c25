package mesh

import (
	"maps"
	"slices"
	"time"
)

// SiteStatus is a site's reachability as one agent sees it.
type SiteStatus string

// Site statuses.
const (
	// SiteReachable: some node of the site is alive (or suspect).
	SiteReachable SiteStatus = "reachable"
	// SiteUnreachable: every node of the site that has not left is failed
	// or not heard from. Seen from outside, a site cut off by the network
	// and a site whose every node crashed look the same; either way its
	// clients are not helped by moving its replicas to another site, so
	// placements keep them (see Sites).
	SiteUnreachable SiteStatus = "unreachable"
	// SiteGone: every node of the site left.
	SiteGone SiteStatus = "gone"
)

// Site is one site's summary: its nodes and whether any is reachable.
type Site struct {
	Name   string     `json:"name"`
	Region string     `json:"region"`
	Nodes  int        `json:"nodes"`
	Alive  int        `json:"alive"`
	Status SiteStatus `json:"status"`
	// Via is "pool" for a site whose nodes this agent sees (its own, or
	// every site where one pool holds them all), "federation" for a site
	// known from its summaries. Heard is when such a summary last came;
	// the API sets it for a pool site with an alive node too (to the time
	// of the answer: membership hears from its alive members).
	Via   string     `json:"via"`
	Heard *time.Time `json:"heard,omitempty"`
	// RTTMillis estimates the round trip from this agent's site to this
	// one: for a federation site, from its gateways' pings or the sites'
	// WAN coordinates (absent until one is known); for a pool site, which
	// the API fills in, from this agent's Vivaldi coordinate to that of
	// the site's nearest alive node (0 for the agent's own site). Absent
	// while the site is unreachable.
	RTTMillis *float64 `json:"rtt_ms,omitempty"`
	// Path is how this agent's site's publishing gateway last reached the
	// site's gateways, where it pinged them lately: "direct" (hole
	// punching included) or "relayed" (through another agent's circuit
	// relay, which the bytes cross twice). Federation only.
	Path string `json:"path,omitempty"`
}

// Via values.
const (
	ViaPool       = "pool"
	ViaFederation = "federation"
)

// Path values.
const (
	PathDirect  = "direct"
	PathRelayed = "relayed"
)

// Sites summarizes nodes by site, sorted by name. A node that failed while
// others of its site are alive is a node failure (its work moves); a site
// with no reachable node is unreachable as a whole (its work stays where it
// is until the site is back).
func Sites(nodes []Node) []Site {
	by := map[string]*Site{}
	left := map[string]int{}
	for _, n := range nodes {
		s := by[n.Site]
		if s == nil {
			s = &Site{Name: n.Site, Region: n.Region, Via: ViaPool}
			by[n.Site] = s
		}
		s.Nodes++
		switch n.Status {
		case StatusAlive, StatusSuspect:
			s.Alive++
		case StatusLeft:
			left[n.Site]++
		}
	}
	out := make([]Site, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		s := by[name]
		switch {
		case s.Alive > 0:
			s.Status = SiteReachable
		case left[name] == s.Nodes:
			s.Status = SiteGone
		default:
			s.Status = SiteUnreachable
		}
		out = append(out, *s)
	}
	return out
}

// UnreachableSites returns the set of unreachable sites among nodes.
func UnreachableSites(nodes []Node) map[string]bool {
	out := map[string]bool{}
	for _, s := range Sites(nodes) {
		if s.Status == SiteUnreachable {
			out[s.Name] = true
		}
	}
	return out
}

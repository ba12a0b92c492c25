package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestSitesThroughRouter runs four agents on four hosts in three sites of
// the testbed, the sites joined by the userspace router with a one-way
// delay per pair. Every cross-site RTT the agents estimate (Vivaldi, fed by
// their probes) comes within 20% of the router's, twice the one-way delay,
// and the two hosts of one site are estimated close. When edge-b is cut
// off from both other sites, each side sees the other unreachable; when the
// links heal, the four are one mesh again.
func TestSitesThroughRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute or two of real time")
	}
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "edge-b", Hosts: 1}, testbed.Site{Name: "cloud", Hosts: 1})
	oneWay := map[[2]string]time.Duration{
		{"edge-a", "edge-b"}: 10 * time.Millisecond,
		{"edge-a", "cloud"}:  20 * time.Millisecond,
		{"edge-b", "cloud"}:  30 * time.Millisecond,
	}
	for l, d := range oneWay {
		bed.SetLink(l[0], l[1], d, 0)
	}
	seed := bed.Host("edge-a", 0)
	var agents []*nsAgent
	for _, site := range []string{"edge-a", "edge-b", "cloud"} {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		for _, h := range bed.Hosts(site) {
			a := &nsAgent{ns: netns{h.NS}, name: h.Name, site: site, gossip: 7946, api: 7470, data: 7471, args: []string{"-tier", tier}}
			if h.Name != seed.Name {
				a.join = seed.IP.String() + ":7946"
			}
			a.start(t)
			agents = append(agents, a)
		}
	}
	dump := func() {
		for _, a := range agents {
			t.Logf("%s log:\n%s", a.name, a.proc.log)
		}
	}
	allAlive := func(from *nsAgent) bool {
		ms := from.members(t)
		if len(ms) != len(agents) {
			return false
		}
		for _, m := range ms {
			if m.Status != api.StatusAlive {
				return false
			}
		}
		return true
	}
	ea, eb := agents[0], agents[2]
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four across three sites", func() bool {
		return allAlive(ea) && allAlive(eb)
	}, dump)

	type pair struct {
		a, b string
		want time.Duration // 0: the same site
	}
	pairs := []pair{
		{"edge-a-1", "edge-a-2", 0},
		{"edge-a-1", "edge-b-1", 2 * oneWay[[2]string{"edge-a", "edge-b"}]},
		{"edge-a-2", "edge-b-1", 2 * oneWay[[2]string{"edge-a", "edge-b"}]},
		{"edge-a-1", "cloud-1", 2 * oneWay[[2]string{"edge-a", "cloud"}]},
		{"edge-b-1", "cloud-1", 2 * oneWay[[2]string{"edge-b", "cloud"}]},
	}
	var last []string
	start := time.Now()
	meshtest.Poll(t, 2*time.Minute, time.Second, "RTT estimates within 20% of the router's delays", func() bool {
		last = last[:0]
		ok := true
		for _, p := range pairs {
			var r api.RTT
			if err := ea.get(t, &r, "rtt", p.a, p.b); err != nil {
				return false
			}
			got := r.Duration()
			// The same site: well under the nearest other site (the
			// estimate adds both nodes' Vivaldi heights, a few ms).
			good := got < 10*time.Millisecond
			if p.want > 0 {
				good = math.Abs(float64(got-p.want)) <= 0.2*float64(p.want)
			}
			ok = ok && good
			last = append(last, fmt.Sprintf("%s↔%s %.1fms (router %s)", p.a, p.b, r.Millis, p.want))
		}
		return ok
	}, func() { t.Logf("last estimates: %s", strings.Join(last, "; ")) })
	t.Logf("estimates within 20%% after %s: %s", time.Since(start).Round(time.Second), strings.Join(last, "; "))

	bed.Cut("edge-b", "edge-a")
	bed.Cut("edge-b", "cloud")
	unreachable := func(from *nsAgent, site string) bool {
		var sites []api.Site
		if err := from.get(t, &sites, "sites"); err != nil {
			return false
		}
		for _, s := range sites {
			if s.Name == site {
				return s.Status == api.SiteUnreachable
			}
		}
		return false
	}
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "edge-b cut off: unreachable from edge-a, and edge-a from edge-b", func() bool {
		return unreachable(ea, "edge-b") && unreachable(eb, "edge-a") && unreachable(eb, "cloud")
	}, dump)
	bed.Heal("edge-b", "edge-a")
	bed.Heal("edge-b", "cloud")
	healed := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four again after the heal", func() bool {
		return allAlive(ea) && allAlive(eb)
	}, dump)
	t.Logf("one mesh again %s after the heal", time.Since(healed).Round(100*time.Millisecond))
}

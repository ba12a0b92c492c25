package federation

import (
	"slices"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
)

// TestSummaryNamesServers: a site's summary names, per model version it
// serves, live nodes with a data-plane address that take forwarded
// requests (not one behind a NAT, whose address others cannot dial), with
// their contacts.
func TestSummaryNamesServers(t *testing.T) {
	t.Parallel()
	n := func(name string, st mesh.Status, data string, fed []string, models ...string) mesh.Node {
		x := mesh.Node{NodeState: mesh.NodeState{Name: name, Site: "edge-b", Tier: "edge", Models: models}, Status: st}
		x.Addrs.Data, x.Addrs.Federation = data, fed
		return x
	}
	nat := []string{"/ip4/1.2.3.4/tcp/4001/p2p/12D3KooWRelay/p2p-circuit/p2p/12D3KooWMe"}
	s := Summarize("edge-b", []mesh.Node{
		n("b1", mesh.StatusAlive, "10.2.0.1:7471", nil, "fraud@2"),
		n("b2", mesh.StatusFailed, "10.2.0.2:7471", nil, "fraud@2"),
		n("b3", mesh.StatusAlive, "", nil, "fraud@2"),
		n("b4", mesh.StatusAlive, "10.2.0.4:7471", nat, "fraud@2"),
		n("b5", mesh.StatusAlive, "10.2.0.5:7471", nil, "fraud@1", "fraud@2"),
	}, nil)
	if got := s.Serving["fraud@2"]; !slices.Equal(got, []string{"b1", "b5"}) {
		t.Errorf("serving fraud@2: %v, want b1 and b5", got)
	}
	if got := s.Serving["fraud@1"]; !slices.Equal(got, []string{"b5"}) {
		t.Errorf("serving fraud@1: %v, want b5", got)
	}
	if c := s.Contacts["b1"]; c.Data != "10.2.0.1:7471" {
		t.Errorf("b1's contact %+v", c)
	}
}

// TestMeasuredIsTheLeastRecentPing: a site's measured round trip is the
// least of its recent pings, not their median: a busy gateway adds its
// delay to some pings, never takes it from the path.
func TestMeasuredIsTheLeastRecentPing(t *testing.T) {
	t.Parallel()
	now := time.Now()
	g := &gateway{pings: map[string][]pingSample{"edge-b": {
		{at: now.Add(-3 * time.Minute), rtt: 5 * time.Millisecond}, // too old to count
		{at: now, rtt: 31 * time.Millisecond}, {at: now, rtt: 20 * time.Millisecond}, {at: now, rtt: 29 * time.Millisecond},
	}}}
	got, _ := g.measured(now)
	if got["edge-b"] != 20 {
		t.Errorf("measured %v ms, want 20: the least recent ping", got["edge-b"])
	}
}

// TestNewPublisherKeepsTheMeasuredRTTs: a gateway that takes over
// publishing starts from the round trips the site's last publisher
// measured (until they are measuredFor old), not from the coordinates a
// takeover has barely moved; its own first ping to a site replaces the
// inherited figure, lower or not; a record older than measuredFor seeds
// nothing.
func TestNewPublisherKeepsTheMeasuredRTTs(t *testing.T) {
	t.Parallel()
	now := time.Now()
	g := &gateway{pings: map[string][]pingSample{"cloud": {{at: now, rtt: 41 * time.Millisecond}}}}
	last := wanRecord{Measured: map[string]float64{"edge-b": 20.5, "cloud": 39, "edge-c": 31, "edge-d": 0}, Relayed: map[string]bool{"edge-c": true}}
	g.seedPings(last, now.Add(-time.Minute), now)
	got, relayed := g.measured(now)
	if got["edge-b"] != 20.5 || got["cloud"] != 41 || got["edge-c"] != 31 || !relayed["edge-c"] || relayed["edge-b"] {
		t.Errorf("measured %v, relayed %v; want edge-b 20.5 and edge-c 31 (relayed) from the last publisher, cloud 41 from this gateway's ping", got, relayed)
	}
	if _, ok := got["edge-d"]; ok {
		t.Errorf("a 0 ms figure was taken: %v", got)
	}
	if got, _ := g.measured(now.Add(measuredFor)); got["edge-b"] != 0 {
		t.Errorf("the last publisher's edge-b still counts %s after it measured it: %v", measuredFor+time.Minute, got)
	}
	if least := g.addPing("edge-b", pingSample{at: now, rtt: 25 * time.Millisecond}); least != 25*time.Millisecond {
		t.Errorf("after this gateway's own ping of 25ms: least %s, want the inherited 20.5ms replaced", least)
	}
	stale := &gateway{pings: map[string][]pingSample{}}
	stale.seedPings(last, now.Add(-measuredFor-time.Second), now)
	if len(stale.pings) != 0 {
		t.Errorf("a record older than %s seeded %v", measuredFor, stale.pings)
	}
}

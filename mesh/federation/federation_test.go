package federation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/multiformats/go-multiaddr"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/federation"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// agent is one node of a test site: its pool member and federation.
type agent struct {
	m    *mesh.Mesh
	f    *federation.Federation
	stop context.CancelFunc
	done chan struct{}
}

func (a *agent) close() {
	a.stop()
	<-a.done
	a.m.Close()
}

// site starts n agents of one site in their own pool on network (fast
// timings), each with a federation that dials peers, with summaries every
// 200ms and syncs every second.
func site(t testing.TB, network *meshtest.Network, name string, n int, peers []string) []*agent {
	t.Helper()
	return siteWith(t, network, name, n, peers, federation.Config{SummaryInterval: 200 * time.Millisecond, SyncInterval: time.Second}, meshtest.FastTimings)
}

// siteWith is site with fc's intervals and gateway count, and tune
// applied to memberlist's configuration.
func siteWith(t testing.TB, network *meshtest.Network, name string, n int, peers []string, fc federation.Config, tune func(*memberlist.Config)) []*agent {
	t.Helper()
	out := startSite(t, network, name, n, peers, fc, tune)
	meshtest.WaitFor(t, 20*time.Second, name+" to form", func() bool {
		for _, a := range out {
			if a.m.NumAlive() != n {
				return false
			}
		}
		return true
	})
	return out
}

// startSite is siteWith without waiting for the pool to form.
func startSite(t testing.TB, network *meshtest.Network, name string, n int, peers []string, fc federation.Config, tune func(*memberlist.Config)) []*agent {
	t.Helper()
	var out []*agent
	for i := range n {
		node := fmt.Sprintf("%s-%d", name, i)
		id, err := mesh.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		m, err := mesh.New(mesh.Config{
			Name: node, Identity: id, Transport: network.NewTransport(node),
			Local:      mesh.NodeState{Tier: mesh.TierEdge, Site: name, Labels: map[string]string{}},
			Memberlist: tune,
			Logger:     quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := m.Join(context.Background(), []string{out[0].m.GossipAddr()}); err != nil {
				t.Fatal(err)
			}
		}
		f, err := federation.New(federation.Config{
			Mesh: m, Identity: id, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: peers, Gateways: fc.Gateways,
			SummaryInterval: fc.SummaryInterval, SyncInterval: fc.SyncInterval, Reachability: fc.Reachability, PSK: fc.PSK,
			Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a := &agent{m: m, f: f, stop: cancel, done: make(chan struct{})}
		go func() { defer close(a.done); f.Run(ctx) }()
		t.Cleanup(func() {
			select {
			case <-a.done:
			default:
				a.close()
			}
		})
		out = append(out, a)
	}
	return out
}

// addrs waits for one of agents to run a gateway and returns its addresses.
func gatewayAddrs(t testing.TB, agents []*agent) []string {
	t.Helper()
	var out []string
	meshtest.WaitFor(t, 20*time.Second, "a gateway", func() bool {
		for _, a := range agents {
			if h := a.f.Host(); h != nil {
				for _, ad := range h.Addrs() {
					out = append(out, ad.String()+"/p2p/"+h.ID().String())
				}
				return true
			}
		}
		return false
	})
	return out
}

func has(m *mesh.Mesh, key, value string) bool {
	e, err := m.Get(key)
	return err == nil && string(e.Value) == value
}

func remote(m *mesh.Mesh, site string) (federation.Remote, bool) {
	for _, r := range federation.Remotes(m, time.Now()) {
		if r.Summary.Site == site {
			return r, true
		}
	}
	return federation.Remote{}, false
}

// TestSitesFederate runs three sites of two agents, each site its own pool,
// joined by federation over libp2p on loopback: a global record written
// anywhere reaches every agent of every site, a site-scoped one stays home,
// every agent sees the other sites' summaries and an RTT estimate to each,
// and when a site's publishing gateway fails the site's next agent takes
// over.
func TestSitesFederate(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	a := site(t, network, "a", 2, nil)
	boot := gatewayAddrs(t, a)
	b := site(t, network, "b", 2, boot)
	c := site(t, network, "c", 2, boot)
	all := append(append(append([]*agent{}, a...), b...), c...)

	// The pools stay apart: federation carries records, not members.
	for _, x := range all {
		if n := len(x.m.Members()); n != 2 {
			t.Fatalf("%s sees %d members, want its own site's 2", x.m.Name(), n)
		}
	}

	if _, err := b[1].m.Put("policies/p1", json.RawMessage(`"v1"`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	if _, err := b[1].m.Put("local/x", json.RawMessage(`"b only"`), mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "the global record in every site", func() bool {
		for _, x := range all {
			if !has(x.m, "policies/p1", `"v1"`) {
				return false
			}
		}
		return true
	})
	for _, x := range append(append([]*agent{}, a...), c...) {
		if _, err := x.m.Get("local/x"); err == nil {
			t.Fatalf("%s holds b's site-scoped record", x.m.Name())
		}
	}

	meshtest.Poll(t, 30*time.Second, 20*time.Millisecond, "every agent to see the other two sites' summaries", func() bool {
		for _, x := range all {
			for _, s := range []string{"a", "b", "c"} {
				if s == x.m.Site() {
					continue
				}
				r, ok := remote(x.m, s)
				if !ok || r.Status != mesh.SiteReachable || r.Summary.Alive != 2 || len(r.Summary.Gateways) == 0 {
					return false
				}
			}
		}
		return true
	}, func() { dumpAgents(t, all) })
	// Every agent estimates its RTT to the other sites from WAN
	// coordinates; on loopback they are well under a millisecond.
	meshtest.WaitFor(t, 30*time.Second, "every agent's RTT estimates to the other sites", func() bool {
		for _, x := range all {
			sites := federation.Sites(x.m, time.Now())
			if len(sites) != 2 {
				return false
			}
			for _, s := range sites {
				if s.RTTMillis == nil || *s.RTTMillis < 0 || *s.RTTMillis > 10 {
					return false
				}
			}
		}
		return true
	})

	// A site not heard from within UnreachableAfter is unreachable, and
	// has no distance: neither the pings from before nor an estimate.
	for _, s := range federation.Sites(a[0].m, time.Now().Add(federation.UnreachableAfter+time.Minute)) {
		if s.Status != mesh.SiteUnreachable || s.RTTMillis != nil || s.Path != "" {
			t.Errorf("site %s unheard for a minute: status %s, rtt %v, path %q; want unreachable, no RTT, no path", s.Name, s.Status, s.RTTMillis, s.Path)
		}
	}

	// The publisher's measured round trips (the medians of its pings)
	// reach its site's other agents with its coordinate.
	meshtest.WaitFor(t, 30*time.Second, "site a's measured round trips to b and c, at a's other agent", func() bool {
		var w struct {
			Vec      []float64
			Measured map[string]float64 `json:"measured_ms"`
		}
		for _, x := range a {
			if e, err := x.m.Get("federation/wan"); err != nil || json.Unmarshal(e.Value, &w) != nil || len(w.Vec) == 0 || len(w.Measured) != 2 {
				return false
			}
		}
		return true
	})

	// Fail site c's publisher: the other agent of c takes over and c's
	// new records still reach a.
	var pub, rest *agent
	meshtest.WaitFor(t, 10*time.Second, "a publishing gateway in c", func() bool {
		pub, rest = nil, nil
		for _, x := range c {
			if _, p := x.f.IsGateway(); p {
				pub = x
			} else {
				rest = x
			}
		}
		return pub != nil && rest != nil
	})
	// Only the publisher subscribes to the topics: a second subscriber
	// per site would make the WAN bytes 2.5 times as many.
	if gw, _ := rest.f.IsGateway(); !gw || federation.Subscribed(rest.f) || !federation.Subscribed(pub.f) {
		t.Errorf("c's standby gateway (a gateway: %v) subscribed: %v; its publisher subscribed: %v", gw, federation.Subscribed(rest.f), federation.Subscribed(pub.f))
	}
	pub.close()
	meshtest.WaitFor(t, 30*time.Second, "c's other agent to publish", func() bool {
		_, p := rest.f.IsGateway()
		return p
	})
	if _, err := rest.m.Put("policies/p2", json.RawMessage(`"from c"`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "c's record after its failover in a", func() bool {
		return has(a[0].m, "policies/p2", `"from c"`) && has(a[1].m, "policies/p2", `"from c"`)
	})
	// The new publisher subscribed: a's records reach c again.
	if _, err := a[0].m.Put("policies/p3", json.RawMessage(`"from a"`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "a's record in c after its failover", func() bool {
		return has(rest.m, "policies/p3", `"from a"`)
	})
	if !federation.Subscribed(rest.f) {
		t.Error("c's new publisher did not subscribe")
	}
}

// TestLateSiteCatchesUp: records published before a site joined the
// federation (GossipSub does not replay them) reach it by the sync its
// gateway runs on connecting, and what it wrote before it connected
// reaches the first site.
func TestLateSiteCatchesUp(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	a := site(t, network, "a", 1, nil)
	for i := range 50 {
		if _, err := a[0].m.Put(fmt.Sprintf("jobs/j%02d", i), json.RawMessage(`1`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
			t.Fatal(err)
		}
	}
	boot := gatewayAddrs(t, a)
	meshtest.WaitFor(t, 10*time.Second, "a to publish its records", func() bool {
		_, p := a[0].f.IsGateway()
		return p
	})

	late := site(t, network, "late", 2, boot)
	if _, err := late[1].m.Put("jobs/late", json.RawMessage(`2`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "a's 50 records in the late site", func() bool {
		for _, x := range late {
			if len(x.m.List("jobs/j")) != 50 {
				return false
			}
		}
		return true
	})
	meshtest.WaitFor(t, 30*time.Second, "the late site's record in a", func() bool { return has(a[0].m, "jobs/late", `2`) })
}

// dumpAgents logs what each agent knows of the federation.
func dumpAgents(t testing.TB, all []*agent) {
	for _, x := range all {
		gw, pub := x.f.IsGateway()
		peers := 0
		if h := x.f.Host(); h != nil {
			peers = len(h.Network().Peers())
		}
		var rs []string
		for _, r := range federation.Remotes(x.m, time.Now()) {
			rs = append(rs, fmt.Sprintf("%s:%s alive=%d gateways=%d heard %s ago", r.Summary.Site, r.Status, r.Summary.Alive, len(r.Summary.Gateways), time.Since(r.Heard).Round(time.Millisecond)))
		}
		t.Logf("%s gateway=%v publisher=%v peers=%d members=%d remotes=%v", x.m.Name(), gw, pub, peers, x.m.NumAlive(), rs)
	}
}

// TestBootstrapThroughAnyAgent: a federation peer need not be a gateway
// of its site: asked, it names its site's gateways, and the new site's
// gateway dials those.
func TestBootstrapThroughAnyAgent(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	fc := federation.Config{Gateways: 1, SummaryInterval: 200 * time.Millisecond, SyncInterval: time.Second}
	a := siteWith(t, network, "a", 3, nil, fc, meshtest.FastTimings)
	var plain *agent
	meshtest.WaitFor(t, 20*time.Second, "a's one gateway, and an agent that is none", func() bool {
		plain = nil
		gateways := 0
		for _, x := range a {
			if gw, _ := x.f.IsGateway(); gw {
				gateways++
			} else if x.f.Host() != nil {
				plain = x
			}
		}
		return gateways == 1 && plain != nil
	})
	h := plain.f.Host()
	var boot []string
	for _, ad := range h.Addrs() {
		boot = append(boot, ad.String()+"/p2p/"+h.ID().String())
	}
	b := siteWith(t, network, "b", 1, boot, fc, meshtest.FastTimings)
	if _, err := a[0].m.Put("policies/x", json.RawMessage(`1`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.Poll(t, 30*time.Second, 20*time.Millisecond, "a's record and summary in b, b's summary in a", func() bool {
		_, inA := remote(a[1].m, "b")
		_, inB := remote(b[0].m, "a")
		return has(b[0].m, "policies/x", `1`) && inA && inB
	}, func() { dumpAgents(t, append(a, b...)) })
}

// TestRelayForAgentsBehindNAT: an agent told it is behind a NAT advertises
// a circuit address through its peer, which serves as a relay because it is
// told it is public; a host that knows only that address connects to it
// through the relay, without the relay's limits, and the agent then dials
// that host directly, which it can. (libp2p advertises circuit addresses
// only through relays at public addresses, and loopback is not one.)
func TestRelayForAgentsBehindNAT(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	// With a gossip key (PSK) only members reach the relay, and it relays
	// without libp2p's limits; without one it keeps them.
	psk := federation.PSKFromGossipKey([]byte("0123456789abcdef"))
	fast := federation.Config{SummaryInterval: 200 * time.Millisecond, SyncInterval: time.Second, PSK: psk}
	pub := fast
	pub.Reachability = federation.ReachabilityPublic
	cloud := siteWith(t, network, "cloud", 1, nil, pub, meshtest.FastTimings)
	relay := gatewayAddrs(t, cloud)[0]
	priv := fast
	priv.Reachability = federation.ReachabilityPrivate
	c := siteWith(t, network, "c", 1, []string{relay}, priv, meshtest.FastTimings)[0]
	var circuit string
	meshtest.WaitFor(t, 20*time.Second, "c to advertise its circuit address through the cloud agent", func() bool {
		if c.f.Host() == nil {
			return false
		}
		for _, a := range c.m.Local().Addrs.Federation {
			if a == relay+"/p2p-circuit/p2p/"+c.f.Host().ID().String() {
				circuit = a
			}
		}
		return circuit != ""
	})
	ai, err := peer.AddrInfoFromString(circuit)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.PrivateNetwork(pnet.PSK(psk)),
		libp2p.Transport(tcp.NewTCPTransport), libp2p.EnableRelay(), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The reservation is made in the background after start: connect
	// until it is there.
	var lastErr error
	meshtest.Poll(t, 20*time.Second, 200*time.Millisecond, "a connection to c through the relay", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		lastErr = h.Connect(ctx, *ai)
		return lastErr == nil
	}, func() { t.Logf("last connect: %v", lastErr) })
	for _, conn := range h.Network().ConnsToPeer(ai.ID) {
		if _, err := conn.RemoteMultiaddr().ValueForProtocol(multiaddr.P_CIRCUIT); err != nil {
			t.Errorf("connection to c at %s, not through the relay", conn.RemoteMultiaddr())
		} else if conn.Stat().Limited {
			t.Errorf("relayed connection is limited: the relay's data and time limits would cut a blob short")
		}
	}
	// c, behind its NAT, can dial out to h, which it reaches only through
	// the relay h dialed it through: its gateway dials h directly, and
	// its streams to h then skip the relay.
	if !federation.LookForDirect(context.Background(), c.f, []peer.AddrInfo{{ID: h.ID(), Addrs: h.Addrs()}}) {
		t.Fatal("c runs no gateway")
	}
	meshtest.WaitFor(t, 10*time.Second, "a direct connection between c and h", func() bool {
		for _, conn := range h.Network().ConnsToPeer(ai.ID) {
			if _, err := conn.RemoteMultiaddr().ValueForProtocol(multiaddr.P_CIRCUIT); err != nil {
				return true
			}
		}
		return false
	})
}

// TestReachabilityChecked: an unknown reachability, and private without a
// peer to relay through, are refused.
func TestReachabilityChecked(t *testing.T) {
	t.Parallel()
	id, err := mesh.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.New(mesh.Config{Name: "x", Identity: id, Transport: (&meshtest.Network{}).NewTransport("x"), Local: mesh.NodeState{Site: "s", Labels: map[string]string{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for r, want := range map[federation.Reachability]string{"nat": `reachability "nat": want auto, public or private`, federation.ReachabilityPrivate: "reachability private needs peers"} {
		if _, err := federation.New(federation.Config{Mesh: m, Identity: id, Reachability: r}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Reachability %q: err = %v, want %q", r, err, want)
		}
	}
}

// TestNewSiteHearsQuietSites: a site whose summary has not changed for a
// while is republished only every 10 s, but a site that joins the
// federation meanwhile hears of it within seconds: its gateway joining
// the summaries topic makes the quiet publisher send at its next interval.
func TestNewSiteHearsQuietSites(t *testing.T) {
	// Not parallel: it shortens how long a new publisher sends every
	// interval, for every gateway in the process. Restored last, after
	// the sites' own cleanups have stopped their gateways.
	t.Cleanup(federation.SetNewPublisher(0))
	network := &meshtest.Network{}
	a := site(t, network, "a", 1, nil)
	boot := gatewayAddrs(t, a)
	b := site(t, network, "b", 1, boot)
	meshtest.WaitFor(t, 30*time.Second, "b to hear of a", func() bool { _, ok := remote(b[0].m, "a"); return ok })
	// The scenario's quiet site: a has sent its summary and nothing in
	// it changes for a second, five summary intervals, past any send b's
	// joining set off. A site is quiet by time, so this is a sleep; it is
	// what made the test fail without the join trigger (3 of 3).
	time.Sleep(time.Second)
	joined := time.Now()
	c := site(t, network, "c", 1, boot)
	meshtest.WaitFor(t, 7*time.Second, "c, new, to hear of quiet a within its summary interval (0.2 s) and a join, not 10 s", func() bool {
		_, ok := remote(c[0].m, "a")
		return ok
	})
	t.Logf("c heard of a %s after it started", time.Since(joined).Round(10*time.Millisecond))
}

// TestGatewaysKeepTheirConnections: past the connection manager's high
// watermark (about 200 connections at 100 sites of two gateways), the
// manager closes connections; a gateway's connections to other sites'
// gateways are protected and stay. The test lowers the watermarks to 1
// and 2, so that four sites are past them, and trims every host.
func TestGatewaysKeepTheirConnections(t *testing.T) {
	// Not parallel: it sets the connection limits of every host made in
	// the process. Restored last, after the sites' own cleanups.
	t.Cleanup(federation.SetConnLimits(1, 2, 0))
	pools := &meshtest.Network{}
	var all []*agent
	var boot []string
	for _, name := range []string{"a", "b", "c", "d"} {
		s := site(t, pools, name, 2, boot)
		if boot == nil {
			boot = gatewayAddrs(t, s)
		}
		all = append(all, s...)
	}
	// gatewayConns returns, for each agent, its connected peers that are
	// gateways of other sites, as their summaries name them.
	gatewayConns := func() map[string][]peer.ID {
		out := map[string][]peer.ID{}
		for _, a := range all {
			h := a.f.Host()
			if h == nil {
				continue
			}
			for _, r := range federation.Remotes(a.m, time.Now()) {
				for _, gw := range r.Summary.Gateways {
					for _, addr := range gw.Addrs {
						ai, err := peer.AddrInfoFromString(addr)
						if err == nil && h.Network().Connectedness(ai.ID) == network.Connected && !slices.Contains(out[a.m.Name()], ai.ID) {
							out[a.m.Name()] = append(out[a.m.Name()], ai.ID)
						}
					}
				}
			}
		}
		return out
	}
	meshtest.Poll(t, 30*time.Second, 50*time.Millisecond, "every agent to hear of the three other sites, and each site's gateways to be connected to every other site", func() bool {
		for _, a := range all {
			if len(federation.Remotes(a.m, time.Now())) != 3 {
				return false
			}
		}
		conns := gatewayConns()
		return len(conns) == 8 && !slices.ContainsFunc(slices.Collect(maps.Values(conns)), func(ps []peer.ID) bool { return len(ps) < 3 })
	}, func() { dumpAgents(t, all) })
	// A gateway protects the gateways of the sites it knows at its next
	// look (every 5 s); a connection is within the manager's grace
	// period (a minute, here none) until then.
	meshtest.Poll(t, 30*time.Second, 50*time.Millisecond, "each gateway to protect its connections to other sites' gateways", func() bool {
		conns := gatewayConns()
		for _, a := range all {
			for _, p := range conns[a.m.Name()] {
				if !a.f.Host().ConnManager().IsProtected(p, "") {
					return false
				}
			}
		}
		return true
	}, nil)
	before := gatewayConns()
	for _, a := range all {
		a.f.Host().ConnManager().TrimOpenConns(context.Background())
	}
	after := gatewayConns()
	for name, ps := range before {
		for _, p := range ps {
			if !slices.Contains(after[name], p) {
				t.Errorf("%s: the connection to another site's gateway %s was closed by a trim", name, p)
			}
		}
	}
}

// TestDeadSitesHoldNothingBack: a gateway dials the gateways of other
// sites in the background. Here a's pool names 20 sites whose gateways
// accept a TCP connection and never answer (each dial waits for its 5 s
// timeout); a record written at a still reaches b within seconds. Dialed
// one after another in a's loop, they held its records back for minutes.
func TestDeadSitesHoldNothingBack(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	// Syncs once a minute: the record goes by a's GossipSub publishing.
	fc := federation.Config{SummaryInterval: 200 * time.Millisecond, SyncInterval: time.Minute}
	a := siteWith(t, network, "a", 1, nil, fc, meshtest.FastTimings)
	b := siteWith(t, network, "b", 1, gatewayAddrs(t, a), fc, meshtest.FastTimings)
	meshtest.WaitFor(t, 30*time.Second, "a and b to hear of each other", func() bool {
		_, ab := remote(a[0].m, "b")
		_, ba := remote(b[0].m, "a")
		return ab && ba
	})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var accepted atomic.Int64
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			held = append(held, c) // never answered
		}
	}()
	for i := range 20 {
		var gws []federation.Gateway
		for j := range 2 {
			key, _, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Fatal(err)
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			gws = append(gws, federation.Gateway{Name: fmt.Sprintf("dead%02d-%d", i, j), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", l.Addr().(*net.TCPAddr).Port, id)}})
		}
		r := federation.Remote{Summary: federation.Summary{Site: fmt.Sprintf("dead%02d", i), Gateways: gws}, Heard: time.Now().UTC()}
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a[0].m.Put(federation.SitePrefix+r.Summary.Site, v, mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 15*time.Second, "a to dial the dead sites' gateways", func() bool { return accepted.Load() > 0 })
	if _, err := a[0].m.Put("policies/p1", json.RawMessage(`"v1"`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the record written at a, at b, while a dials the dead sites", func() bool { return has(b[0].m, "policies/p1", `"v1"`) })
}

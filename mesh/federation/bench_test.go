package federation_test

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/federation"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

var fullScale = flag.Bool("federation.full", false, "BenchmarkFederation: add one pool at 30 sites of 10 agents, and 100 sites of 10 agents (1,000 in one process) all three ways")

// BenchmarkFederation compares two ways to run S sites of A agents in one
// process, with the production timings (memberlist's LAN config as the
// mesh tunes it, compression off as in the mesh benchmarks; summaries
// checked every 5s, syncs every 30s):
//
//   - impl=federation: each site its own pool (in-memory network), the
//     sites joined by federation over libp2p on loopback TCP, two gateways
//     per site (the default); impl=federation-1-gateway, one;
//   - impl=one-pool: all S×A agents in one memberlist pool.
//
// It reports how long a global record written at one agent takes to reach
// every agent of every site (median and worst of 5), and the WAN traffic:
// the bytes that cross between sites over a quiet minute, sent plus
// received, per site (libp2p's byte counts for federation; the bytes of
// packets and streams between agents of different sites for one pool).
//
// impl=federation-gossipsub-defaults (and -1-gateway-gossipsub-defaults)
// runs the federation with GossipSub's default parameters rather than its
// own (gossipParams: a smaller mesh, less gossip).
//
// Sizes: 10 sites of 10 agents, all four ways; 30 of 10 with the
// default gateways, both ways; 100 sites of 3 agents with one gateway
// each, both ways, for how WAN bytes grow with sites (they do not grow
// with agents per site: only gateways speak across sites).
//
// One pool is run at 10 sites only: on a 2-core machine a pool of 300
// in-process agents did not form within 5 minutes. 100 sites of 10 (1,000
// pool members and libp2p hosts in one process) are out of reach of both
// there: the pools' own gossip takes about 2.5 ms of CPU per agent per
// second (0.74 cores for 300 agents, by a CPU profile), more than 2 cores
// for 1,000. 100 sites with two gateways each need more file descriptors
// than a limit of 20,000: in one process a loopback connection holds a
// descriptor at both ends, and there are 2 to 4 between each two sites (a
// size that needs more descriptors than the process may open is skipped,
// saying so; with one gateway each, 100 sites of 10 held 18,796).
//
// -args -federation.full adds one pool at 30 sites of 10, and 100 sites
// of 10 agents, all three ways, for a machine with more cores. With -v a
// run logs how far it got every 15 s (pools formed, sites heard, agents
// started), so that one stopped from outside still says where it was.
//
// federated-s is the time from when the sites after the first start, all
// at once, until every agent has heard of every other site; conns-max the
// most connections one agent's host holds; fds the file descriptors the
// process holds; unreachable-pct the share of (agent, other site) pairs in
// which the site counts as unreachable after the quiet minute (0 when
// every summary arrives).
func BenchmarkFederation(b *testing.B) {
	type size struct {
		sites, agents int
		twoGateways   bool // the default: two gateways per site
		oneGateway    bool
		onePool       bool
		// gossipDefaults: also the federation with GossipSub's default
		// parameters, not gossipParams (two gateways per site, or one
		// where the size runs no two-gateway row).
		gossipDefaults bool
	}
	sizes := []size{{10, 10, true, true, true, true}, {30, 10, true, false, false, true}, {100, 3, false, true, false, true}}
	if *fullScale {
		sizes[1].onePool = true
		sizes = append(sizes, size{100, 10, true, true, true, false})
	}
	// joined runs the sites joined by federation, with gateways per site
	// (0: the default, two).
	joined := func(sites, agents, gateways int) func(*testing.B) {
		return func(b *testing.B) {
			all, traffic := federated(b, sites, agents, gateways)
			measure(b, meshes(all), traffic, sites)
			reportFederation(b, all)
		}
	}
	for _, size := range sizes {
		name := fmt.Sprintf("sites=%d/agents=%d", size.sites, size.agents)
		if size.twoGateways {
			b.Run(name+"/impl=federation", joined(size.sites, size.agents, 0))
		}
		if size.gossipDefaults {
			gateways, impl := 0, "federation-gossipsub-defaults"
			if !size.twoGateways {
				gateways, impl = 1, "federation-1-gateway-gossipsub-defaults"
			}
			run := joined(size.sites, size.agents, gateways)
			b.Run(name+"/impl="+impl, func(b *testing.B) {
				defer federation.SetGossipSubDefaults()()
				run(b)
			})
		}
		if size.oneGateway {
			b.Run(name+"/impl=federation-1-gateway", joined(size.sites, size.agents, 1))
		}
		if size.onePool {
			b.Run(name+"/impl=one-pool", func(b *testing.B) {
				all, traffic := onePool(b, size.sites, size.agents)
				measure(b, all, traffic, size.sites)
			})
		}
	}
}

// federated starts the sites as pools joined by federation, with gateways
// per site (0: the default, two); traffic returns the libp2p bytes of
// every agent so far.
func federated(b *testing.B, sites, agents, gateways int) ([]*agent, func() map[string]int64) {
	enoughDescriptors(b, sites, cmp.Or(gateways, 2))
	fc := federation.Config{Gateways: gateways, SummaryInterval: 5 * time.Second, SyncInterval: 30 * time.Second}
	quiet := func(c *memberlist.Config) { c.EnableCompression = false }
	all := siteWith(b, &meshtest.Network{}, "s000", agents, nil, fc, quiet)
	boot := gatewayAddrs(b, all)
	// The other sites start at once, as after a power cut, and form their
	// pools meanwhile.
	for i := 1; i < sites; i++ {
		all = append(all, startSite(b, &meshtest.Network{}, fmt.Sprintf("s%03d", i), agents, boot, fc, quiet)...)
	}
	start := time.Now()
	progress := progressLog(b, start)
	meshtest.Poll(b, 5*time.Minute, time.Second, "every site's pool to form", func() bool {
		least := agents
		for _, a := range all {
			least = min(least, a.m.NumAlive())
		}
		progress("pools: the smallest view holds %d of %d agents", least, agents)
		return least == agents
	}, func() { dumpAgents(b, all) })
	meshtest.Poll(b, 5*time.Minute, time.Second, "every site to hear of every other", func() bool {
		least := sites - 1
		for _, a := range all {
			least = min(least, len(federation.Remotes(a.m, time.Now())))
		}
		progress("sites: the agent that knows fewest has heard of %d of %d others", least, sites-1)
		return least == sites-1
	}, func() { dumpAgents(b, all) })
	b.ReportMetric(time.Since(start).Seconds(), "federated-s")
	return all, func() map[string]int64 {
		n := map[string]int64{}
		for _, a := range all {
			for p, v := range federation.TrafficByProtocol(a.f) {
				n[p] += v
			}
		}
		return n
	}
}

// enoughDescriptors skips the benchmark where the process may open too
// few files for sites with the given gateways each: gateways of two sites
// hold 1 to 4 loopback connections between them, a descriptor at each end
// (see the fds metric: 100 sites of 3 agents with one gateway each held
// about 12,000).
func enoughDescriptors(b *testing.B, sites, gateways int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if need := 6 * sites * sites * gateways / 5; uint64(need) > lim.Cur {
		b.Skipf("%d sites of %d gateways need about %d file descriptors; this process may open %d", sites, gateways, need, lim.Cur)
	}
}

// reportFederation reports, after the quiet minute, the most connections
// one agent's host holds, to be read beside libp2p's connection manager's
// watermarks (connLimits), the process's file descriptors, and the share of (agent, other site) pairs in
// which the agent counts the site unreachable: its last summary came
// longer than federation.UnreachableAfter ago (none should).
func reportFederation(b *testing.B, all []*agent) {
	most, pairs, unreachable := 0, 0, 0
	for _, a := range all {
		if h := a.f.Host(); h != nil {
			most = max(most, len(h.Network().Conns()))
		}
		for _, r := range federation.Remotes(a.m, time.Now()) {
			pairs++
			if r.Status != mesh.SiteReachable {
				unreachable++
			}
		}
	}
	b.ReportMetric(float64(most), "conns-max")
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		b.ReportMetric(float64(len(fds)), "fds")
	}
	b.ReportMetric(100*float64(unreachable)/float64(max(pairs, 1)), "unreachable-pct")
}

// meshes returns the agents' meshes.
func meshes(all []*agent) []*mesh.Mesh {
	var ms []*mesh.Mesh
	for _, a := range all {
		ms = append(ms, a.m)
	}
	return ms
}

// onePool starts every agent in one pool; traffic returns the bytes sent
// between agents of different sites so far, counted at both ends.
func onePool(b *testing.B, sites, agents int) ([]*mesh.Mesh, func() map[string]int64) {
	var cross atomic.Int64
	siteOf := func(node string) string { s, _, _ := strings.Cut(node, "-"); return s }
	network := &meshtest.Network{Sent: func(from, to string, n int) {
		if siteOf(from) != siteOf(to) {
			cross.Add(2 * int64(n))
		}
	}}
	rng := rand.New(rand.NewPCG(1, uint64(sites*agents)))
	var ms []*mesh.Mesh
	progress := progressLog(b, time.Now())
	for i := range sites * agents {
		progress("one pool: %d of %d agents started", i, sites*agents)
		name := fmt.Sprintf("s%03d-%d", i/agents, i%agents)
		id, _ := mesh.NewIdentity()
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: network.NewTransport(name),
			Local:      mesh.NodeState{Tier: mesh.TierEdge, Site: fmt.Sprintf("s%03d", i/agents), Labels: map[string]string{}},
			Memberlist: func(c *memberlist.Config) { c.EnableCompression = false },
			Logger:     quietLogger(),
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		if i > 0 {
			if err := m.Join(context.Background(), []string{ms[rng.IntN(len(ms))].GossipAddr()}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // pace joins, as the mesh benchmarks do
		}
		ms = append(ms, m)
	}
	meshtest.Poll(b, 5*time.Minute, time.Second, "one pool", func() bool {
		least := len(ms)
		for _, m := range ms {
			least = min(least, m.NumAlive())
		}
		progress("one pool: the smallest view holds %d of %d agents", least, len(ms))
		return least == len(ms)
	}, nil)
	return ms, func() map[string]int64 { return map[string]int64{"memberlist": cross.Load()} }
}

// measure writes 5 global records and times their spread, then counts the
// traffic of a quiet minute, by protocol: for federation, the shares of
// GossipSub (summaries and records) and of the WAN pings are reported.
func measure(b *testing.B, all []*mesh.Mesh, traffic func() map[string]int64, sites int) {
	var times []float64
	for r := range 5 {
		src := all[(r*7919)%len(all)]
		key := fmt.Sprintf("policies/bench-%d", r)
		if _, err := src.Put(key, json.RawMessage(`1`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
			b.Fatal(err)
		}
		d := meshtest.Elapsed(b, 2*time.Minute, "the record at every agent", func() bool {
			for _, m := range all {
				if _, err := m.Get(key); err != nil {
					return false
				}
			}
			return true
		})
		times = append(times, d.Seconds())
		b.Logf("record %d at every agent after %.2fs", r, d.Seconds())
	}
	before, start := traffic(), time.Now()
	time.Sleep(time.Minute) // the measurement window: a quiet minute of summaries, probes and syncs
	after := traffic()
	var total, gossipsub, pings int64
	for p, v := range after {
		d := v - before[p]
		total += d
		switch {
		case strings.HasPrefix(p, "/meshsub/"):
			gossipsub += d
		case p == ping.ID:
			pings += d
		}
	}
	perSite := float64(total) / time.Since(start).Minutes() / float64(sites)
	slices.Sort(times)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(times[len(times)/2], "record-median-s")
	b.ReportMetric(times[len(times)-1], "record-max-s")
	b.ReportMetric(perSite/1024, "wan-KiB/site/min")
	if _, pooled := after["memberlist"]; !pooled && total > 0 {
		b.ReportMetric(100*float64(gossipsub)/float64(total), "gossipsub-pct")
		b.ReportMetric(100*float64(pings)/float64(total), "ping-pct")
	}
}

// progressLog returns a logger for a long wait that logs at most every 15
// seconds, with the time since start: under -test.v a benchmark's log
// lines print as they come, so a run at full scale that is stopped from
// outside still says how far it got.
func progressLog(b *testing.B, start time.Time) func(format string, args ...any) {
	var last time.Time
	return func(format string, args ...any) {
		if time.Since(last) < 15*time.Second {
			return
		}
		last = time.Now()
		b.Logf("%.0fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

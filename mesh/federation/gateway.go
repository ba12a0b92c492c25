package federation

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/strata-mesh/strata/mesh"
)

// maxBatch is the most record bytes one GossipSub message carries; the
// topic takes messages up to twice that.
const maxBatch = 1 << 20

// gossipParams returns GossipSub's parameters for the federation's
// topics (a variable for BenchmarkFederation's comparison with
// GossipSub's defaults): its defaults, with a smaller mesh and less
// gossip. A publishing gateway connects to every other site's, so the mesh
// carries each message to sites one hop away already: every copy that a
// site's mesh peers forward after the first, and every IHAVE announcing
// it, is WAN bytes for nothing, and those were most of the WAN bytes. A
// mesh of 4 (3 to 6) rather than 6 (5 to 12) still reaches every site,
// over a few hops, where links are missing. IHAVE goes to D_lazy (4)
// peers out of the mesh each heartbeat, not also to a quarter of them
// (GossipFactor): at 100 sites that was 24 peers a second, each told the
// IDs of every message of the last 3 seconds.
var gossipParams = func() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi, p.Dscore, p.Dout, p.Dlazy = 4, 3, 6, 2, 1, 4
	p.GossipFactor = 0
	return p
}

// summaryQuiet is how often the publishing gateway sends its site's
// summary while nothing in it changes but its coordinate (a change, or a
// gateway joining the topic, makes it go out within SummaryInterval): a
// third of UnreachableAfter, so that the other sites miss two in a row
// before they count the site unreachable.
// Summaries are most of the WAN bytes (BenchmarkFederation).
const summaryQuiet = UnreachableAfter / 3

// joinedSends is how many summary intervals the publisher sends its
// summary at after a gateway joins the summaries topic. One was not
// enough: a summary sent within tens of milliseconds of the join, while
// GossipSub was still setting up its stream to the new peer, did not reach
// it, and the next came summaryQuiet later: TestNewSiteHearsQuietSites
// failed 7 times in 45 runs with one send, none in 50 with three.
const joinedSends = 3

// newPublisher is how long a gateway that began publishing sends its
// summary every SummaryInterval, changed or not (a variable for tests).
var newPublisher = UnreachableAfter

// summaryRefresh is how often the publishing gateway rewrites a remote
// site's catalog entry when its summary has not changed (so that Heard
// stays fresh), and its own site's WAN record. Half of summaryQuiet: every
// quiet summary that arrives is written, so one lost leaves Heard at most
// two quiet intervals old, short of UnreachableAfter.
const summaryRefresh = summaryQuiet / 2

// wanProbeInterval is how often the publishing gateway pings one other
// site's gateway to update its WAN coordinate, with libp2p's ping (a
// stream each). In BenchmarkFederation, pings over a stream kept open per
// peer were 0.3% of the WAN bytes, not worth a protocol of their own.
// Every 2 s, the testbed's estimates (TestFederatedSites) settled too
// slowly for its minute.
const wanProbeInterval = time.Second

// written is an entry's version as published.
type written struct {
	version uint64
	origin  string
}

// gateway is a running gateway: the agent's host in the federation's
// GossipSub topics.
type gateway struct {
	f      *Federation
	h      host.Host
	ps     *pubsub.PubSub
	recs   *pubsub.Topic
	sums   *pubsub.Topic
	ctx    context.Context // the gateway's, until close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	rank       int
	gateways   []string
	published  map[string]written   // records this gateway published, by key
	heard      map[string]Summary   // each other site's latest summary
	heardAt    map[string]time.Time // when it came
	wrote      map[string]time.Time // when this gateway last wrote a site's entry
	tried      map[peer.ID]retry    // when this gateway looks again for a direct path to a peer (direct)
	protected  map[peer.ID]bool     // the other sites' gateways protected from the connection manager (connect)
	running    map[string]bool      // the background work under way, by key (alone)
	dials      chan struct{}        // a slot per dial under way, up to maxDials
	lastSum    time.Time
	sent       Summary   // the last summary sent
	sentAt     time.Time // when (zero: none since this gateway began publishing)
	joined     time.Time // when a gateway last joined the summaries topic (watchJoins)
	publishing time.Time // when this gateway began publishing
	wroteWAN   time.Time // when this gateway last wrote the site's WAN coordinate
	// unsubscribe ends the publisher's subscriptions; nil while this
	// gateway is not the publisher (see subscribe).
	unsubscribe context.CancelFunc

	// wan is this gateway's Vivaldi coordinate among the other sites'
	// gateways (serf's client, as in Consul's WAN pool): the publisher's
	// is the site's, in its summary.
	wan *coordinate.Client
	// pings are the last round trips measured to each site (under mu).
	pings map[string][]pingSample
}

// pingSample is one round trip measured to a site, and whether it went
// through a relay (the gateway pinged had no direct connection).
type pingSample struct {
	at      time.Time
	rtt     time.Duration
	relayed bool
	// seeded: the site's last publisher measured it (seedPings); this
	// gateway's first own ping to the site replaces it.
	seeded bool
}

// Measured round trips: the least of the last pingsKept pings to a site,
// of those within measuredFor. A ping is never faster than the path, but
// is slower by however long either gateway took to answer it: on a busy
// host the median read 30 ms for a 20 ms path, and the least does not.
const (
	pingsKept   = 5
	measuredFor = 2 * time.Minute
)

// seedPings takes the round trips the site's last publisher measured
// (w, written at at, within measuredFor of now) as pings of at, for the
// sites this gateway has not pinged: they count until measuredFor from
// then, or until this gateway pings the site itself. g.mu is held.
func (g *gateway) seedPings(w wanRecord, at, now time.Time) {
	if now.Sub(at) > measuredFor {
		return
	}
	for site, ms := range w.Measured {
		if ms <= 0 || math.IsNaN(ms) || math.IsInf(ms, 0) || len(g.pings[site]) > 0 {
			continue
		}
		g.pings[site] = []pingSample{{at: at, rtt: time.Duration(ms * float64(time.Millisecond)), relayed: w.Relayed[site], seeded: true}}
	}
}

// measured returns the least of the recent pings to each site, in
// milliseconds, and the sites whose last ping went through a relay.
func (g *gateway) measured(now time.Time) (out map[string]float64, relayed map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, relayed = map[string]float64{}, map[string]bool{}
	for site, ps := range g.pings {
		var rtts []time.Duration
		for _, p := range ps {
			if now.Sub(p.at) <= measuredFor {
				rtts = append(rtts, p.rtt)
			}
		}
		if len(rtts) == 0 {
			delete(g.pings, site)
			continue
		}
		if ps[len(ps)-1].relayed {
			relayed[site] = true
		}
		out[site] = float64(slices.Min(rtts)) / float64(time.Millisecond)
	}
	return out, relayed
}

func (f *Federation) startGateway(ctx context.Context) (*gateway, error) {
	h := f.Host()
	var err error
	ctx, cancel := context.WithCancel(ctx)
	g := &gateway{f: f, h: h, cancel: cancel, rank: -1, published: map[string]written{}, heard: map[string]Summary{}, heardAt: map[string]time.Time{}, wrote: map[string]time.Time{}, tried: map[peer.ID]retry{},
		protected: map[peer.ID]bool{}, running: map[string]bool{}, dials: make(chan struct{}, maxDials), pings: map[string][]pingSample{}}
	fail := func(err error) (*gateway, error) {
		cancel()
		removePubSub(h)
		return nil, err
	}
	if g.wan, err = coordinate.NewClient(coordinate.DefaultConfig()); err != nil {
		return fail(err)
	}
	g.ps, err = pubsub.NewGossipSub(ctx, h,
		pubsub.WithGossipSubParams(gossipParams()),
		pubsub.WithMaxMessageSize(2*maxBatch),
		pubsub.WithPeerExchange(true),
		pubsub.WithStrictSignatureVerification(true))
	if err != nil {
		return fail(err)
	}
	for _, t := range []struct {
		name  string
		topic **pubsub.Topic
	}{{topicRecords, &g.recs}, {topicSummaries, &g.sums}} {
		if *t.topic, err = g.ps.Join(t.name); err != nil {
			return fail(err)
		}
	}
	joins, err := g.sums.EventHandler()
	if err != nil {
		return fail(err)
	}
	g.ctx = ctx
	f.mu.Lock()
	f.gw = g
	f.mu.Unlock()
	g.wg.Go(func() { g.probeWAN(ctx) })
	g.wg.Go(func() { g.watchJoins(ctx, joins) })
	g.wg.Go(func() { g.loop(ctx) })
	return g, nil
}

// subscribe makes the gateway, which became its site's publisher, a
// subscriber of both topics; unsubscribe ends that when it no longer is.
// The other gateways stay connected to the other sites' gateways, subscribed
// to nothing: GossipSub sends a subscriber every message (and gossip about
// them), so a second subscriber per site made a site's WAN bytes 2.5 times
// as many (BenchmarkFederation), for a site that hears the others a few
// seconds sooner when its publisher fails. Called with mu held.
func (g *gateway) subscribe() {
	recs, err := g.recs.Subscribe(pubsub.WithBufferSize(1024))
	if err != nil {
		g.f.metrics.errors.WithLabelValues("subscribe").Inc()
		return
	}
	sums, err := g.sums.Subscribe(pubsub.WithBufferSize(1024))
	if err != nil {
		recs.Cancel()
		g.f.metrics.errors.WithLabelValues("subscribe").Inc()
		return
	}
	ctx, cancel := context.WithCancel(g.ctx)
	g.unsubscribe = cancel
	g.wg.Go(func() { g.readRecords(ctx, recs) })
	g.wg.Go(func() { g.readSummaries(ctx, sums) })
}

// watchJoins makes the publisher send its summary at each of its next
// joinedSends SummaryIntervals, not summaryQuiet, when a gateway joins the
// summaries topic: a site new to the federation hears of this one within
// seconds.
func (g *gateway) watchJoins(ctx context.Context, h *pubsub.TopicEventHandler) {
	defer h.Cancel()
	for {
		ev, err := h.NextPeerEvent(ctx)
		if err != nil {
			return
		}
		if ev.Type == pubsub.PeerJoin {
			g.mu.Lock()
			g.joined = time.Now()
			g.mu.Unlock()
		}
	}
}

// close ends the gateway's part: its topics and loops; the host goes on.
func (g *gateway) close() {
	g.cancel()
	g.wg.Wait()
	removePubSub(g.h)
	g.protect(nil)
}

// protectTag is the tag under which a gateway protects its connections to
// other sites' gateways from the host's connection manager.
const protectTag = "strata-federation-gateway"

// protect makes peers the gateway's protected peers: the connection
// manager does not close connections to them however many the host has.
func (g *gateway) protect(peers map[peer.ID]bool) {
	cm := g.h.ConnManager()
	g.mu.Lock()
	defer g.mu.Unlock()
	for p := range g.protected {
		if !peers[p] {
			cm.Unprotect(p, protectTag)
			delete(g.protected, p)
		}
	}
	for p := range peers {
		if !g.protected[p] {
			cm.Protect(p, protectTag)
			g.protected[p] = true
		}
	}
}

// removePubSub takes GossipSub's protocols off h once its PubSub ended, so
// that peers no longer take the host for a subscriber.
func removePubSub(h host.Host) {
	for _, p := range h.Mux().Protocols() {
		if strings.HasPrefix(string(p), "/meshsub/") || strings.HasPrefix(string(p), "/floodsub/") {
			h.RemoveStreamHandler(p)
		}
	}
}

func (g *gateway) setRank(rank int, gateways []string) {
	var seed *coordinate.Coordinate
	var last wanRecord
	var lastAt time.Time
	if rank == 0 {
		seed = SiteCoordinate(g.f.cfg.Mesh)
		last, lastAt = siteWANAt(g.f.cfg.Mesh)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case rank == 0 && g.unsubscribe == nil:
		g.subscribe()
	case rank != 0 && g.unsubscribe != nil:
		g.unsubscribe()
		g.unsubscribe = nil
	}
	if rank == 0 && g.rank != 0 {
		// A new publisher sends every record of its site once: what the
		// old one had not sent yet goes out now, not at the next sync.
		clear(g.published)
		g.lastSum, g.sentAt, g.publishing = time.Time{}, time.Time{}, time.Now()
		// Only the publisher pings: it goes on from the site's last
		// coordinate rather than from the origin.
		if seed != nil && seed.IsValid() {
			_ = g.wan.SetCoordinate(seed) // one of other dimensions is left
		}
		// And from the round trips it measured: until this gateway
		// has pinged a site, the site's RTT would be read from the
		// coordinates, which a takeover has barely moved.
		g.seedPings(last, lastAt, time.Now())
	}
	g.rank, g.gateways = rank, gateways
}

func (g *gateway) loop(ctx context.Context) {
	m := g.f.cfg.Mesh
	connect := time.NewTicker(5 * time.Second)
	defer connect.Stop()
	tick := time.NewTicker(g.f.cfg.SummaryInterval)
	defer tick.Stop()
	sync := time.NewTicker(g.f.cfg.SyncInterval)
	defer sync.Stop()
	g.connect(ctx)
	was := false
	for {
		g.mu.Lock()
		publisher := g.rank == 0
		due := time.Since(g.lastSum) >= g.f.cfg.SummaryInterval
		g.mu.Unlock()
		if publisher && !was {
			// A new publisher did not hear the federation before: what
			// other sites wrote meanwhile comes by a sync, not in 30 s.
			if ps := g.remotePeers(); len(ps) > 0 {
				g.f.goSync(ctx, ps[rand.IntN(len(ps))])
			}
		}
		was = publisher
		if publisher {
			g.publishRecords(ctx)
			if due {
				g.publishSummary(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-m.Changed():
			// Coalesce a burst of changes into one batch.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		case <-tick.C:
		case <-connect.C:
			g.connect(ctx)
		case <-sync.C:
			if ps := g.remotePeers(); len(ps) > 0 {
				g.f.goSync(ctx, ps[rand.IntN(len(ps))])
			}
		}
	}
}

// ownIDs returns the IDs of the nodes of this gateway's site.
func (g *gateway) ownIDs() map[string]bool {
	m := g.f.cfg.Mesh
	out := map[string]bool{}
	for _, n := range m.Nodes() {
		if n.Site == m.Site() {
			out[n.ID] = true
		}
	}
	return out
}

// publishRecords sends the global records written in this site that it
// has not sent yet, in batches of at most maxBatch bytes. Records from
// other sites are not sent on: GossipSub carried them to every site.
func (g *gateway) publishRecords(ctx context.Context) {
	own := g.ownIDs()
	// Each record is encoded once; a batch is their JSON array.
	var batch []json.RawMessage
	var keys []string
	size := 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := g.recs.Publish(ctx, encode(batch)); err != nil {
			g.f.metrics.errors.WithLabelValues("publish").Inc()
			// Unmark them: they go out next time.
			g.mu.Lock()
			for _, k := range keys {
				delete(g.published, k)
			}
			g.mu.Unlock()
		} else {
			g.f.metrics.published.Add(float64(len(batch)))
		}
		batch, keys, size = nil, nil, 0
	}
	for _, e := range g.f.cfg.Mesh.GlobalEntriesMeta() {
		if !own[e.Origin] {
			continue
		}
		w := written{e.Version, e.Origin}
		g.mu.Lock()
		sent := g.published[e.Key] == w
		g.published[e.Key] = w
		g.mu.Unlock()
		if sent {
			continue
		}
		full, err := g.f.cfg.Mesh.LoadGlobal(e)
		if err != nil {
			g.mu.Lock()
			delete(g.published, e.Key) // collected meanwhile, or tried again next time
			g.mu.Unlock()
			continue
		}
		b := encode(full)
		if size+len(b) > maxBatch {
			flush()
		}
		batch, keys = append(batch, b), append(keys, e.Key)
		size += len(b)
	}
	flush()
}

func (g *gateway) publishSummary(ctx context.Context) {
	m := g.f.cfg.Mesh
	g.mu.Lock()
	gws := g.gateways
	g.lastSum = time.Now()
	g.mu.Unlock()
	s := Summarize(m.Site(), m.Nodes(), gws)
	s.Coordinate = rounded(g.wan.GetCoordinate())
	g.mu.Lock()
	// A new publisher sends every interval for a while: its first
	// summaries may go out before GossipSub has connected it to anyone.
	quiet := !g.sentAt.IsZero() && same(g.sent, s) && time.Since(g.sentAt) < summaryQuiet &&
		time.Since(g.joined) > joinedSends*g.f.cfg.SummaryInterval &&
		time.Since(g.publishing) > newPublisher
	g.mu.Unlock()
	if !quiet {
		if err := g.sums.Publish(ctx, encode(s)); err != nil {
			g.f.metrics.errors.WithLabelValues("publish").Inc()
			return
		}
		g.f.metrics.summaries.WithLabelValues("sent").Inc()
		g.mu.Lock()
		g.sent, g.sentAt = s, time.Now()
		g.mu.Unlock()
	}
	// The site's other agents estimate RTTs to other sites from it.
	if time.Since(g.wroteWAN) >= summaryRefresh {
		w := wanRecord{Coordinate: *s.Coordinate}
		w.Measured, w.Relayed = g.measured(time.Now())
		if _, err := m.Put(wanKey, encode(w), mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
			g.f.metrics.errors.WithLabelValues("write").Inc()
		} else {
			g.wroteWAN = time.Now()
		}
	}
}

// rounded returns c with its distances rounded to the microsecond and its
// error to a thousandth: in full precision (8 floats of 17 digits), the
// coordinate in every summary made BenchmarkFederation's WAN bytes grow
// by 38%, and by 19% rounded.
func rounded(c *coordinate.Coordinate) *coordinate.Coordinate {
	// Dividing by a power of ten, not multiplying by its inverse, keeps
	// the shortest decimal (0.000123, not 0.00012299999999999998).
	r := func(v, per float64) float64 { return math.Round(v*per) / per }
	out := c.Clone()
	for i, v := range out.Vec {
		out.Vec[i] = r(v, 1e6)
	}
	out.Error, out.Adjustment, out.Height = r(out.Error, 1e3), r(out.Adjustment, 1e6), r(out.Height, 1e6)
	return out
}

// probeWAN pings, while this gateway publishes (only its coordinate is
// the site's), every wanProbeInterval, a connected gateway of another
// site whose summary carries a coordinate (the connected peers among the
// gateways the known summaries name: remotePeers, for those with a
// coordinate), and updates this gateway's WAN coordinate with the round
// trip.
func (g *gateway) probeWAN(ctx context.Context) {
	tick := time.NewTicker(wanProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g.mu.Lock()
		publisher := g.rank == 0
		g.mu.Unlock()
		if !publisher {
			continue
		}
		type target struct {
			site  string
			coord *coordinate.Coordinate
		}
		sites := map[peer.ID]target{}
		for _, s := range g.known() {
			if s.Coordinate == nil {
				continue
			}
			for _, gw := range s.Gateways {
				for _, a := range gw.Addrs {
					if ai, err := peer.AddrInfoFromString(a); err == nil {
						sites[ai.ID] = target{s.Site, s.Coordinate}
					}
				}
			}
		}
		var peers []peer.ID
		for _, p := range g.h.Network().Peers() {
			if _, ok := sites[p]; ok {
				peers = append(peers, p)
			}
		}
		if len(peers) == 0 {
			continue
		}
		p := peers[rand.IntN(len(peers))]
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rtt, ok := pingOnce(pctx, ping.Ping(pctx, g.h, p))
		cancel()
		if !ok {
			// A lost sample: libp2p closes the channel on a timeout,
			// and its zero value (RTT 0, no error) is no distance.
			g.f.metrics.errors.WithLabelValues("ping").Inc()
			continue
		}
		site := sites[p].site
		relayed := relayedOnly(g.h.Network().ConnsToPeer(p)) // libp2p's streams prefer a direct connection
		least := g.addPing(site, pingSample{at: time.Now(), rtt: rtt, relayed: relayed})
		if _, err := g.wan.Update(site, sites[p].coord, least); err != nil {
			g.f.metrics.malformed.Inc()
		}
	}
}

// addPing keeps p, a ping this gateway measured to site, among the last
// pingsKept (those seeded from the last publisher give way to it), and
// returns the least of them: the WAN coordinates learn from the least
// recent ping too, as a site's pool does from its members' (see mesh's
// RTT filter).
func (g *gateway) addPing(site string, p pingSample) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := slices.DeleteFunc(g.pings[site], func(s pingSample) bool { return s.seeded })
	ps = append(ps, p)
	if n := len(ps); n > pingsKept {
		ps = ps[n-pingsKept:]
	}
	g.pings[site] = ps
	least := p.rtt
	for _, s := range ps {
		least = min(least, s.rtt)
	}
	return least
}

// pingOnce reads one answer of a libp2p ping: ok is false when the ping
// failed, the channel was closed unanswered (a timeout), or the RTT is not
// positive. A timed-out probe read as 0 ms made a cut-off site look next
// door to placement.
func pingOnce(ctx context.Context, ch <-chan ping.Result) (time.Duration, bool) {
	select {
	case res, open := <-ch:
		if !open || res.Error != nil || res.RTT <= 0 {
			return 0, false
		}
		return res.RTT, true
	case <-ctx.Done():
		return 0, false
	}
}

func (g *gateway) readRecords(ctx context.Context, sub *pubsub.Subscription) {
	defer sub.Cancel()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		if msg.ReceivedFrom == g.h.ID() && msg.GetFrom() == g.h.ID() {
			continue
		}
		var batch []mesh.Entry
		if err := json.Unmarshal(msg.Data, &batch); err != nil {
			g.f.metrics.malformed.Inc()
			continue
		}
		g.f.merge(batch)
	}
}

// merge folds records from another site into the pool.
func (f *Federation) merge(batch []mesh.Entry) {
	n := 0
	for _, e := range batch {
		if f.cfg.Mesh.MergeRemote(e) {
			n++
		}
	}
	f.metrics.received.Add(float64(len(batch)))
	f.metrics.merged.Add(float64(n))
}

func (g *gateway) readSummaries(ctx context.Context, sub *pubsub.Subscription) {
	defer sub.Cancel()
	m := g.f.cfg.Mesh
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		var s Summary
		if err := json.Unmarshal(msg.Data, &s); err != nil || s.Site == "" {
			g.f.metrics.malformed.Inc()
			continue
		}
		if s.Site == m.Site() {
			continue
		}
		g.f.metrics.summaries.WithLabelValues("received").Inc()
		g.mu.Lock()
		prev, had := g.heard[s.Site]
		// An older summary is a reordered one, unless the site's last
		// one came a while ago: then its new publisher's clock is behind
		// the old one's, and its summaries are the news.
		if had && s.Seq < prev.Seq && time.Since(g.heardAt[s.Site]) < 3*g.f.cfg.SummaryInterval {
			g.mu.Unlock()
			continue
		}
		g.heard[s.Site] = s
		g.heardAt[s.Site] = time.Now()
		stale := time.Since(g.wrote[s.Site]) >= summaryRefresh
		g.mu.Unlock()
		// Only the publisher subscribes: it writes what changed, and
		// what it has not written for a while.
		if !stale && had && same(prev, s) {
			continue
		}
		r := Remote{Summary: s, Heard: time.Now().UTC()}
		if _, err := m.Put(SitePrefix+s.Site, encode(r), mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
			g.f.metrics.errors.WithLabelValues("write").Inc()
			continue
		}
		g.mu.Lock()
		g.wrote[s.Site] = time.Now()
		g.mu.Unlock()
	}
}

// known returns the latest summary of every other site this gateway or
// its site (the pool's copies, written by the site's gateways) heard.
func (g *gateway) known() map[string]Summary {
	out := map[string]Summary{}
	for _, r := range Remotes(g.f.cfg.Mesh, time.Now()) {
		out[r.Summary.Site] = r.Summary
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for site, s := range g.heard {
		if s.Seq >= out[site].Seq {
			out[site] = s
		}
	}
	return out
}

// remotePeers returns the connected peers that are gateways of other
// sites (as their summaries name them).
func (g *gateway) remotePeers() []peer.ID {
	known := map[peer.ID]bool{}
	for _, s := range g.known() {
		for _, gw := range s.Gateways {
			for _, a := range gw.Addrs {
				if ai, err := peer.AddrInfoFromString(a); err == nil {
					known[ai.ID] = true
				}
			}
		}
	}
	var out []peer.ID
	for _, p := range g.h.Network().Peers() {
		if known[p] {
			out = append(out, p)
		}
	}
	return out
}

// connect dials, for every other site heard of (here, or by the site's
// other gateway, whose summaries are in the pool), its gateways when none
// is connected, and the configured peers while no other site is
// connected. The dials run in the background (dialSite, bootstrap). It
// protects the connections to those gateways from the connection manager
// (see connLimits), and tries a site's gateways in an order of its own
// (rendezvous hashing of the two peer IDs), so that other sites' dials
// spread over a site's gateways rather than all go to its first.
func (g *gateway) connect(ctx context.Context) {
	var targets [][]peer.AddrInfo
	gateways := map[peer.ID]bool{}
	for _, s := range g.known() {
		var site []peer.AddrInfo
		for _, gw := range s.Gateways {
			if ais, err := addrInfos(gw.Addrs); err == nil {
				site = append(site, ais...)
			}
		}
		for _, ai := range site {
			gateways[ai.ID] = true
		}
		targets = append(targets, dialOrder(g.h.ID(), site))
	}
	g.protect(gateways)
	connected := func(ais []peer.AddrInfo) bool {
		for _, ai := range ais {
			if g.h.Network().Connectedness(ai.ID) == network.Connected {
				return true
			}
		}
		return false
	}
	anySite := false
	for _, site := range targets {
		g.direct(ctx, site, time.Now())
		if connected(site) {
			anySite = true
			continue
		}
		g.dialSite(ctx, site)
	}
	if !anySite {
		// The gateways the pool knows of may all be gone (replaced
		// while this site was cut off): the peers are asked meanwhile.
		g.bootstrap(ctx)
	}
}

// maxDials is how many sites one gateway dials at once. The dials run
// in the background: done one after another in the gateway's loop, at
// 100 sites, they held its summaries and records back for up to two
// minutes (BenchmarkFederation's 100 sites of 3 agents, two gateways
// each, over QUIC on a 2-core machine).
const maxDials = 8

// alone runs f in the background unless a run under the same key is
// under way.
func (g *gateway) alone(key string, f func()) {
	g.mu.Lock()
	if g.running[key] {
		g.mu.Unlock()
		return
	}
	g.running[key] = true
	g.mu.Unlock()
	g.wg.Go(func() {
		defer func() {
			g.mu.Lock()
			delete(g.running, key)
			g.mu.Unlock()
		}()
		f()
	})
}

// dialSite dials, in the background, site's gateways in turn until one
// answers, unless a dial of the site is under way.
func (g *gateway) dialSite(ctx context.Context, site []peer.AddrInfo) {
	if len(site) == 0 {
		return
	}
	// The site by its first gateway in this gateway's order.
	g.alone("dial "+site[0].ID.String(), func() {
		select {
		case g.dials <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-g.dials }()
		for _, ai := range site {
			if g.dial(ctx, ai) {
				return
			}
		}
	})
}

// bootstrap asks, in the background, the configured peers where their
// sites' gateways are (a peer need not be one itself), and dials those:
// for a gateway that has no other site's gateway connected. One at a time.
func (g *gateway) bootstrap(ctx context.Context) {
	g.alone("bootstrap", func() {
		for _, ai := range g.f.peers {
			if ai.ID == g.h.ID() || !g.dial(ctx, ai) {
				continue
			}
			gws, site, err := g.f.askGateways(ctx, ai.ID)
			if err != nil {
				g.f.metrics.errors.WithLabelValues("gateways").Inc()
				continue
			}
			if site == g.f.cfg.Mesh.Site() {
				continue
			}
			for _, gw := range gws {
				if ais, err := addrInfos(gw.Addrs); err == nil {
					for _, x := range ais {
						g.dial(ctx, x)
					}
				}
			}
		}
	})
}

// direct looks for a direct path to the gateways of site that this one
// reaches only through a relay, once the relayed connection is older than
// punchGrace (libp2p tries to punch a hole when one opens: DCUtR), and
// then again, less and less often (directRetry), while no direct
// connection comes:
//
//   - It dials the gateway's direct addresses: an agent behind a NAT can
//     dial out to one that is not, where the relayed connection was
//     opened the other way (by an agent that cannot dial in here). Left
//     alone, it would carry this pair's pings and streams through the
//     relay agent for good, at the sum of both legs' round trips, since a
//     site counts as connected once any of its gateways is.
//   - If that fails, the two are both behind NATs and the punch failed:
//     when both opened a relayed connection to the other at once, which
//     is common as they hear of each other's sites at the same time, both
//     start punching at once and both may fail. The one of the pair with
//     the lower peer ID closes the relayed connections, unless a
//     data-plane stream is open on one, and dials the other through the
//     relay again: the other, taking an inbound relayed connection, punches
//     alone.
//
// It runs in the background: a dial that cannot get through waits for its
// timeout.
func (g *gateway) direct(ctx context.Context, site []peer.AddrInfo, now time.Time) {
	for _, ai := range site {
		conns := g.h.Network().ConnsToPeer(ai.ID)
		if ai.ID == g.h.ID() || len(conns) == 0 {
			continue
		}
		relayed := relayedOnly(conns)
		young := slices.ContainsFunc(conns, func(c network.Conn) bool { return now.Sub(c.Stat().Opened) < punchGrace })
		g.mu.Lock()
		r, had := g.tried[ai.ID]
		due := relayed && !young && (!had || now.After(r.next))
		switch {
		case !relayed:
			delete(g.tried, ai.ID)
		case due:
			r.wait = min(max(2*r.wait, directRetry), directRetryMax)
			g.tried[ai.ID] = retry{next: now.Add(r.wait), wait: r.wait}
		}
		g.mu.Unlock()
		if !due {
			continue
		}
		direct := peer.AddrInfo{ID: ai.ID, Addrs: slices.DeleteFunc(slices.Clone(ai.Addrs), isCircuit)}
		circuit := peer.AddrInfo{ID: ai.ID, Addrs: slices.DeleteFunc(slices.Clone(ai.Addrs), func(a ma.Multiaddr) bool { return !isCircuit(a) })}
		g.wg.Go(func() {
			if len(direct.Addrs) > 0 && g.dial(network.WithForceDirectDial(ctx, "a direct path to a gateway reached through a relay"), direct) {
				g.f.metrics.direct.WithLabelValues("dialed").Inc()
				g.f.cfg.Logger.Info("dialed another site's gateway directly, which was reached through a relay", "peer", ai.ID)
				return
			}
			if g.h.ID() > ai.ID || len(circuit.Addrs) == 0 {
				return
			}
			conns := g.h.Network().ConnsToPeer(ai.ID)
			if !relayedOnly(conns) {
				return // punched meanwhile
			}
			for _, c := range conns {
				for _, st := range c.GetStreams() {
					if st.Protocol() == protoData {
						return
					}
				}
			}
			_ = g.h.Network().ClosePeer(ai.ID)
			if g.dial(network.WithAllowLimitedConn(ctx, "a new relayed connection for a hole punch"), circuit) {
				g.f.metrics.direct.WithLabelValues("repunched").Inc()
				g.f.cfg.Logger.Info("reconnected through a relay to another site's gateway behind a NAT, for it to punch a hole", "peer", ai.ID)
			}
		})
	}
}

// relayedOnly reports whether every one of conns goes through a relay.
func relayedOnly(conns []network.Conn) bool {
	return !slices.ContainsFunc(conns, func(c network.Conn) bool { return !isCircuit(c.RemoteMultiaddr()) })
}

// isCircuit reports whether a is a relayed (p2p-circuit) address.
func isCircuit(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// punchGrace is how long a relayed connection to another site's gateway
// is left to libp2p's hole punching before this gateway looks for a direct
// path itself. It looks again after directRetry, then after twice as long
// each time, up to directRetryMax: each look may close a relayed
// connection that a NAT no hole gets through keeps the only path.
const (
	punchGrace     = 15 * time.Second
	directRetry    = 30 * time.Second
	directRetryMax = 8 * time.Minute
)

// retry is when gateway.direct looks again for a direct path to a peer.
type retry struct {
	next time.Time
	wait time.Duration
}

func (g *gateway) dial(ctx context.Context, ai peer.AddrInfo) bool {
	if ai.ID == g.h.ID() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := g.h.Connect(ctx, ai); err != nil {
		g.f.metrics.errors.WithLabelValues("dial").Inc()
		g.f.cfg.Logger.Debug("federation dial failed", "peer", ai.ID, "err", err)
		return false
	}
	return true
}

// dialOrder returns site's gateways in the order self dials them: by
// rendezvous hashing of (self, gateway), so that every dialer has its own.
func dialOrder(self peer.ID, site []peer.AddrInfo) []peer.AddrInfo {
	score := func(id peer.ID) uint64 {
		h := fnv.New64a()
		h.Write([]byte(self))
		h.Write([]byte{0})
		h.Write([]byte(id))
		return h.Sum64()
	}
	return slices.SortedFunc(slices.Values(site), func(a, b peer.AddrInfo) int {
		return cmp.Or(cmp.Compare(score(b.ID), score(a.ID)), cmp.Compare(a.ID, b.ID))
	})
}

// addrInfos groups multiaddrs with /p2p/ID by peer.
func addrInfos(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, a := range addrs {
		x, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", a, err)
		}
		mas = append(mas, x)
	}
	return peer.AddrInfosFromP2pAddrs(mas...)
}

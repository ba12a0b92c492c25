package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// HeaderForwarded marks a request one agent forwarded to another, so the
// second answers it or says no, and never forwards it again.
const HeaderForwarded = infer.HeaderForwardedBy

// HeaderClientSite names, on a request one agent forwards to another, the
// forwarding agent's site: the client site of the request, which the
// receiving agent counts its traffic by (mesh.ModelTraffic.Sites). It is
// believed only on a request that came over the data plane.
const HeaderClientSite = "Strata-Client-Site"

// HeaderTried names, on a forwarded response, the replicas tried before
// the one that answered and why each was passed over ("edge-a-2: did
// not answer within 500ms"; several are comma-separated): a request
// answered further away than its nearest replica says why. It is absent
// when the first replica tried answered.
const HeaderTried = "Strata-Tried"

// Peers is what forwarding reads of the mesh.
type Peers interface {
	ID() string
	Name() string
	Nodes() []mesh.Node
	RTT(a, b string) (time.Duration, error)
}

// RoundTripper sends an HTTP request to a peer over the data plane, to
// the node whose certificate names it (*dataplane.Node implements it).
type RoundTripper interface {
	RoundTrip(ctx context.Context, to dataplane.Peer, req *http.Request) (*http.Response, error)
}

// Connector is implemented by a RoundTripper that can open its
// connection to a peer before a request (*dataplane.Node does): a try
// whose answer is bounded connects first, within connectTimeout, and
// the bound counts from the request.
type Connector interface {
	Connect(ctx context.Context, to dataplane.Peer) error
}

// ForwarderConfig configures a Forwarder. DataPlane is nil in a mesh
// without a CA: nothing is forwarded then (ErrNoDataPlane).
type ForwarderConfig struct {
	Mesh      Peers
	DataPlane RoundTripper
	// Remote, when set (a federated mesh), lists nodes of other sites that
	// serve model (at version, or any when ""), nearest first, with their
	// name, site and data-plane address: a model served in no node of
	// this agent's pool is forwarded to one of them.
	Remote func(model, version string) []mesh.Node
	// SLO, when set, is the tightest latency SLO (p99 from the clients)
	// of the services that serve model, 0 for none: replicas beyond it
	// are sent a request only when no replica within it is alive.
	SLO func(model string) time.Duration
	// Vouch, when set, says whether a placement names node as a replica
	// (standby: as a standby) of a service that serves model (Vouchers
	// does): a node is sent requests for a model only then, whatever
	// its own document claims. Nil believes every document (tests).
	Vouch func(node, model string, standby bool) bool
	// Declared, when set, names a service that serves model, empty for
	// none (Vouchers.Declared): a request for a model that a service
	// declares but that no replica serves yet, as this agent sees the
	// mesh (its view lags a gossip round behind the replica's own), is
	// answered 503, to be retried, not 404.
	Declared func(model string) string
	// Site is this agent's site, sent with each request it forwards
	// (HeaderClientSite).
	Site string
}

// Forwarder sends requests to other agents over the data plane (QUIC,
// mutual TLS, to the node the certificate names): inference for models
// served elsewhere, and anything the API proxies (a job's logs). The
// caller's credentials stay here: the receiving agent serves a peer the
// mesh CA vouches for, not a token. Safe for concurrent use.
type Forwarder struct {
	cfg ForwarderConfig
	// sent counts, per node name, the requests sent there and not yet
	// answered: the part of its load this agent knows first hand.
	sent sync.Map // name → *atomic.Int64
	// ejected holds, per node name, until when the node is tried after
	// the others (see eject).
	ejected sync.Map // name → time.Time
	// draw returns a number in [0, 1) (math/rand/v2's Float64; tests fix
	// it).
	draw func() float64
	// now is time.Now (tests fix it).
	now func() time.Time
	// unvouched counts the nodes passed over because no placement names
	// them for the model their document says they serve.
	unvouched atomic.Int64
}

// ErrNoDataPlane is returned (wrapped, saying which end lacks it) where a
// request would have to be forwarded to another agent and this agent or
// that one has no data plane. Requests never go to a peer's HTTP API:
// an impostor there would receive the caller's token.
var ErrNoDataPlane = errors.New("forwarding needs the data plane (mesh CA)")

// credentialHeaders are never forwarded: they authenticate the caller to
// this agent, and the peer authenticates this agent by its certificate.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// NewForwarder returns a forwarder.
func NewForwarder(cfg ForwarderConfig) *Forwarder {
	return &Forwarder{cfg: cfg, draw: rand.Float64, now: time.Now}
}

var (
	_ infer.Forwarder = (*Forwarder)(nil)
	_ Connector       = (*dataplane.Node)(nil)
)

// Forward sends a request for a model this agent does not serve to an
// agent that does, near and not busy (see byLoad); it implements
// infer.Forwarder.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	if by := r.Header.Get(HeaderForwarded); by != "" {
		return fmt.Errorf("%w: %s (forwarded here by %s)", infer.ErrModelNotFound, model, by)
	}
	cs := f.servingNodes(model, version)
	if here, ok := infer.SpillHere(r.Context()); ok {
		// A busy replica's spill goes only where it is expected to be
		// answered sooner: a site busy throughout keeps its requests.
		cs = slices.DeleteFunc(cs, func(c cand) bool { return f.expected(c, model, version) >= here })
	}
	targets := f.byLoad(cs, model, version)
	// A caller with a standby of the model (infer.WithFallback) answers
	// the request itself rather than wait on a replica that may be dead:
	// only alive replicas of this site's pool that have not failed a
	// request lately are tried, each for a bounded time.
	fallback := infer.HasFallback(r.Context())
	if fallback {
		targets = slices.DeleteFunc(targets, func(n mesh.Node) bool { return n.Status != mesh.StatusAlive || f.isEjected(n.Name) })
		if len(targets) == 0 {
			return fmt.Errorf("%w: no replica of %s in this site's pool is answering", infer.ErrModelNotFound, model)
		}
	}
	if sb := f.standbyNodes(model, version); len(sb) > 0 && !fallback {
		// Warm standbys answer when no replica does: after the replicas
		// that are alive and answering, before suspect and ejected ones.
		k := 0
		for k < len(targets) && targets[k].Status == mesh.StatusAlive && !f.isEjected(targets[k].Name) {
			k++
		}
		targets = slices.Concat(targets[:k], sb, targets[k:])
	}
	if len(targets) == 0 && f.cfg.Remote != nil {
		targets = f.cfg.Remote(model, version)
	}
	// The last resort: nodes that serve it but this agent believes
	// failed. On a starved host the failure detector can be wrong about
	// every peer at once (a member that answers within a second after
	// all), and a request it would fail with 404 may still be answered.
	lastResort := false
	if len(targets) == 0 {
		if targets = f.believedFailed(model, version); len(targets) == 0 {
			return f.whyNot(model, version)
		}
		lastResort = true
	}
	if f.cfg.DataPlane == nil {
		return fmt.Errorf("%w: %s is served on %s, and this agent has no data plane (set ca_cert, and ca_key or node_cert: strata keygen -pki DIR makes them)", ErrNoDataPlane, model, targets[0].Name)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxForwardBody+1))
	if err != nil {
		return err
	}
	if len(body) > maxForwardBody {
		return fmt.Errorf("request over %d bytes", maxForwardBody)
	}
	// The mesh's view of who serves what lags by a gossip round: a node
	// that just stopped serving answers 404, and the next nearest is
	// tried. So is the next one when a node does not answer in time (one
	// that died a moment ago is not known dead for seconds): each try but
	// the last is bounded (see tryTimeout).
	tries := targets[:min(len(targets), 3)]
	var lastErr error
	var passed []string // for HeaderTried: "node: why"
	for i, n := range tries {
		var bound time.Duration
		switch {
		case lastResort:
			bound = lastResortTimeout
		case fallback || (i < len(tries)-1 && len(body) <= boundedBody):
			bound = tryTimeout(n, model, version)
		}
		if c, ok := f.cfg.DataPlane.(Connector); ok && bound > 0 && !lastResort && n.Addrs.Data != "" {
			// The connection first, bounded on its own: on a busy host a
			// handshake can take longer than a replica's answer is given.
			cctx, ccancel := context.WithTimeout(r.Context(), connectTimeout)
			err := c.Connect(cctx, dataplane.Peer{Addr: n.Addrs.Data, Name: n.Name, ID: n.ID})
			late := cctx.Err() != nil && r.Context().Err() == nil
			ccancel()
			if err != nil {
				lastErr = fmt.Errorf("%s: %w", n.Name, err)
				if late {
					lastErr = fmt.Errorf("%s: no connection within %s", n.Name, connectTimeout)
				}
				if r.Context().Err() == nil {
					f.eject(n.Name)
				}
				passed = append(passed, lastErr.Error())
				continue
			}
		}
		ctx, cancel := context.WithCancel(r.Context())
		var answer *time.Timer // bounds the wait for the node's answer (its headers)
		if bound > 0 {
			answer = time.AfterFunc(bound, cancel)
		}
		out := f.outstanding(n.Name)
		out.Add(1)
		resp, err := f.Send(ctx, n, r.Method, r.URL.RequestURI(), r.Header, body)
		late := answer != nil && !answer.Stop()
		if err != nil {
			out.Add(-1)
			cancel()
			lastErr = err
			why := err.Error()
			if late {
				why = fmt.Sprintf("did not answer within %s", bound)
				lastErr = fmt.Errorf("%s %s", n.Name, why)
			}
			if (late || r.Context().Err() == nil) && !errors.Is(err, ErrNoDataPlane) {
				f.eject(n.Name) // the node failed, not (only) the caller who went away
			}
			passed = append(passed, n.Name+": "+why)
			continue
		}
		resp.Body = cancelOnClose{resp.Body, cancel}
		if resp.StatusCode == http.StatusNotFound {
			out.Add(-1)
			resp.Body.Close()
			lastErr = fmt.Errorf("%w: %s no longer serves %s", infer.ErrModelNotFound, n.Name, model)
			passed = append(passed, n.Name+": answered 404")
			continue
		}
		if fallback && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) {
			// A caller that can answer itself does rather than pass on
			// a replica's refusal (busy, loading, failing).
			out.Add(-1)
			resp.Body.Close()
			lastErr = fmt.Errorf("%s answered %d", n.Name, resp.StatusCode)
			passed = append(passed, fmt.Sprintf("%s: answered %d", n.Name, resp.StatusCode))
			continue
		}
		w.Header().Del(infer.HeaderServedBy) // the serving agent names itself
		w.Header().Del(HeaderTried)
		resp.Header.Del(HeaderTried) // this agent's word on its tries, not the peer's
		if len(passed) > 0 {
			w.Header().Set(HeaderTried, strings.Join(passed, ", "))
		}
		CopyResponse(w, resp)
		out.Add(-1)
		return nil
	}
	if lastResort {
		var names []string
		for _, n := range targets {
			names = append(names, n.Name)
		}
		return fmt.Errorf("%w: %s is served on %s, which this agent believes failed, and none answered (%v)", infer.ErrModelNotReady, model, strings.Join(names, ", "), lastErr)
	}
	return lastErr
}

// lastResortTimeout bounds a request to a node believed failed: a dead
// one never answers, and the caller should hear so soon.
const lastResortTimeout = 2 * time.Second

// tryTimeout bounds the wait for n's answer to a request for model when
// another node can be tried next: four times the p99 handling time n last
// reported for it, and at least tryFloor. Past it the request goes to the
// next node (inference is a pure function of its input: asking twice is
// safe).
func tryTimeout(n mesh.Node, model, version string) time.Duration {
	var p99 float64 // milliseconds
	for _, t := range n.Traffic {
		if name, ver, _ := strings.Cut(t.Model, "@"); name == model && (version == "" || ver == version) {
			p99 = max(p99, t.P99)
		}
	}
	return max(tryFloor, 4*time.Duration(p99*float64(time.Millisecond)))
}

// boundedBody is the largest request whose tries are bounded (but with a
// fallback): a larger one may take far longer than the replica's usual
// requests, and giving up on it would compute it again elsewhere and
// eject a replica that was only busy with it.
const boundedBody = 1 << 20

// tryFloor is the least tryTimeout: a node that has not answered a
// request within half a second while another node (or a standby here)
// could is taken for dead, as the failure detector would only say
// seconds later. It is below the 1 s that clients commonly wait: a
// forwarder that gave up when its caller does would help no one.
const tryFloor = 500 * time.Millisecond

// connectTimeout bounds the opening of a connection to a node before a
// bounded try (see Connector): a node that died a moment ago is not
// connected to, and a handshake at both ends of a busy host takes far
// less.
const connectTimeout = 2 * time.Second

// ejectFor is how long a node that failed a request (no answer in time,
// or a connection that failed) is tried only after the others: long
// enough for the mesh's failure detector to have caught up with a node
// that died, short enough that a node that was only slow for a moment is
// soon back.
const ejectFor = 10 * time.Second

// eject has the node named name tried after the others for ejectFor.
func (f *Forwarder) eject(name string) { f.ejected.Store(name, f.now().Add(ejectFor)) }

// isEjected says whether the node named name failed a request less than
// ejectFor ago.
func (f *Forwarder) isEjected(name string) bool {
	v, ok := f.ejected.Load(name)
	if !ok {
		return false
	}
	if f.now().Before(v.(time.Time)) {
		return true
	}
	f.ejected.CompareAndDelete(name, v)
	return false
}

// believedFailed lists the nodes other than this one, failed or in a site
// cut off, whose last document says they serve model (at version, or any
// when empty) or hold it as a warm standby, nearest first. A node that
// left is not listed: it said goodbye.
func (f *Forwarder) believedFailed(model, version string) []mesh.Node {
	var out []mesh.Node
	for _, n := range f.cfg.Mesh.Nodes() {
		if (n.Status != mesh.StatusFailed && n.Status != mesh.StatusUnreachable) || n.ID == f.cfg.Mesh.ID() || n.Addrs.Data == "" {
			continue
		}
		if serves(n, model, version) && f.vouched(n, model, false) || lists(n.Standbys, model, version) && f.vouched(n, model, true) {
			out = append(out, n)
		}
	}
	f.nearestFirst(out)
	return out
}

// standbyNodes lists the alive or suspect nodes other than this one that
// hold model (at version, or any when empty) as a warm standby, have not
// failed a request lately and can be forwarded to: the alive ones nearest
// first, then the suspect ones (on a busy host a suspect often answers).
func (f *Forwarder) standbyNodes(model, version string) []mesh.Node {
	var alive, suspect []mesh.Node
	for _, n := range f.cfg.Mesh.Nodes() {
		if (n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect) || n.ID == f.cfg.Mesh.ID() || n.Addrs.Data == "" || f.isEjected(n.Name) || !lists(n.Standbys, model, version) || !f.vouched(n, model, true) {
			continue
		}
		if n.Status == mesh.StatusAlive {
			alive = append(alive, n)
		} else {
			suspect = append(suspect, n)
		}
	}
	f.nearestFirst(alive)
	f.nearestFirst(suspect)
	return append(alive, suspect...)
}

// vouched says whether a placement names n for model (as a standby when
// standby is set), counting the nodes it does not: their documents claim
// what no controller placed there. A node named the model's standby may
// also serve it as a replica: when its replica fails the owner promotes
// the standby, and the node's document saying it serves can arrive
// before the placement that names it a replica.
func (f *Forwarder) vouched(n mesh.Node, model string, standby bool) bool {
	if f.cfg.Vouch == nil || f.cfg.Vouch(n.Name, model, standby) || !standby && f.cfg.Vouch(n.Name, model, true) {
		return true
	}
	f.unvouched.Add(1)
	return false
}

// Unvouched counts the times a node was passed over as a forward target
// because no placement names it for a model its document says it serves
// (or holds as a standby): once per request that considered it.
func (f *Forwarder) Unvouched() int64 { return f.unvouched.Load() }

// serves says whether n's document lists model (at version, or any when
// empty) among the models it serves.
func serves(n mesh.Node, model, version string) bool { return lists(n.Models, model, version) }

// lists says whether refs ("name@version") name model (at version, or any
// when empty).
func lists(refs []string, model, version string) bool {
	return slices.ContainsFunc(refs, func(m string) bool {
		name, ver, _ := strings.Cut(m, "@")
		return name == model && (version == "" || ver == version)
	})
}

// nearestFirst sorts ns by this agent's estimated RTT to each, those of
// unknown distance last.
func (f *Forwarder) nearestFirst(ns []mesh.Node) {
	rtt := make(map[string]time.Duration, len(ns))
	for _, n := range ns {
		d, err := safe.RTT(f.cfg.Mesh, f.cfg.Mesh.Name(), n.Name)
		if err != nil {
			d = time.Hour // unknown distance (or a coordinate that cannot be compared): last
		}
		rtt[n.Name] = d
	}
	sort.SliceStable(ns, func(i, j int) bool { return rtt[ns[i].Name] < rtt[ns[j].Name] })
}

// whyNot says why no agent serves model (at version, when given): it is
// loading somewhere (not ready), it failed to load (with the reason),
// only other versions are served, a service declares it but no replica
// is known to serve yet (not ready), or nothing of it is.
func (f *Forwarder) whyNot(model, version string) error {
	ref := model
	if version != "" {
		ref += "@" + version
	}
	var loading, failed, others []string
	for _, n := range f.cfg.Mesh.Nodes() {
		if !live(n) || (f.cfg.Vouch != nil && !f.cfg.Vouch(n.Name, model, false)) {
			continue // what a node no placement names says of the model is not repeated
		}
		for _, m := range n.Models {
			if name, v, _ := strings.Cut(m, "@"); name == model && !slices.Contains(others, v) {
				others = append(others, v)
			}
		}
		for _, r := range n.Replicas {
			name, v, _ := strings.Cut(r.Model, "@")
			if name != model || (version != "" && v != version) {
				continue
			}
			switch r.State {
			case mesh.ReplicaLoading:
				loading = append(loading, n.Name)
			case mesh.ReplicaFailed:
				failed = append(failed, n.Name+": "+r.Reason)
			}
		}
	}
	switch {
	case len(loading) > 0:
		return fmt.Errorf("%w: %s is loading on %s", infer.ErrModelNotReady, ref, strings.Join(loading, ", "))
	case len(failed) > 0:
		return fmt.Errorf("%w: %s failed to load (%s)", infer.ErrModelNotReady, ref, strings.Join(failed, "; "))
	case len(others) > 0:
		slices.Sort(others)
		return fmt.Errorf("%w: version %s of %s is served nowhere (served versions: %s)", infer.ErrModelNotFound, version, model, strings.Join(others, ", "))
	}
	if f.cfg.Declared != nil {
		if svc := f.cfg.Declared(model); svc != "" {
			return fmt.Errorf("%w: %s serves %s, and no replica of it serves yet as this agent sees the mesh: try again (strata placements %s says where it is placed)", infer.ErrModelNotReady, svc, ref, svc)
		}
	}
	return fmt.Errorf("%w: %s is served nowhere in the mesh", infer.ErrModelNotFound, model)
}

// Send sends a request to agent n over the data plane (QUIC, mutual TLS;
// it fails unless n's certificate names n), marked as forwarded by this
// one, with header less the caller's credentials (Authorization,
// Proxy-Authorization, Cookie). Without a data plane here, or a data
// address of n's, it returns an error wrapping ErrNoDataPlane. The caller
// closes the response body.
func (f *Forwarder) Send(ctx context.Context, n mesh.Node, method, uri string, header http.Header, body []byte) (*http.Response, error) {
	switch {
	case f.cfg.DataPlane == nil:
		return nil, fmt.Errorf("%w: this agent has none, so it cannot send to %s (set ca_cert, and ca_key or node_cert: strata keygen -pki DIR makes them)", ErrNoDataPlane, n.Name)
	case n.Addrs.Data == "":
		return nil, fmt.Errorf("%w: %s advertises no data-plane address (its agent has no mesh CA configured)", ErrNoDataPlane, n.Name)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.Addrs.Data+uri, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	// This agent sends the request, not the browser that may have sent
	// it here: a peer's API would see the page's origin as foreign to
	// its own address and refuse it.
	for _, h := range browserHeaders {
		req.Header.Del(h)
	}
	for _, h := range credentialHeaders {
		req.Header.Del(h)
	}
	req.Header.Set(HeaderForwarded, f.cfg.Mesh.Name())
	req.Header.Del(HeaderClientSite)
	if f.cfg.Site != "" {
		req.Header.Set(HeaderClientSite, f.cfg.Site)
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	resp, err := f.cfg.DataPlane.RoundTrip(ctx, dataplane.Peer{Addr: n.Addrs.Data, Name: n.Name, ID: n.ID}, req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// ClientSite is the client site of an inference request answered here,
// for its traffic by site: the site the forwarding agent names
// (HeaderClientSite) for a request that came over the data plane, where
// the peer is authenticated (dataplane.HeaderPeer, which only the data
// plane sets); own, this agent's site, for one made at its API. It is ""
// for a forward that names no site, or one the mesh would refuse in a
// document (mesh.ValidSiteName).
func ClientSite(r *http.Request, own string) string {
	if r.Header.Get(dataplane.HeaderPeer) == "" {
		return own
	}
	if site := r.Header.Get(HeaderClientSite); mesh.ValidSiteName(site) {
		return site
	}
	return ""
}

// browserHeaders are the headers only a browser sets, which tell an
// agent's API a request comes from a web page; a forwarded request drops
// them.
var browserHeaders = []string{"Origin", "Referer", "Cookie", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User"}

// cancelOnClose ends a request's context when its response body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// CopyResponse writes resp (headers, status, body) to w and closes it.
func CopyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// maxForwardBody bounds a forwarded request, as infer bounds a local one.
const maxForwardBody = 64 << 20

// forwardTimeout bounds a forwarded request, response body included.
const forwardTimeout = 30 * time.Second

// live says a node may answer: alive, or suspect (it missed probes and
// others are asked to confirm; under load it most often answers after
// all). A request tries suspects after every alive node.
func live(n mesh.Node) bool { return n.Status == mesh.StatusAlive || n.Status == mesh.StatusSuspect }

// ServingNodes lists the live nodes other than this one that serve model
// (at version, or any when empty) and can be forwarded to (they advertise
// a data-plane address): alive ones nearest first by estimated RTT, then
// suspect ones and those that failed a request of this agent's in the
// last ejectFor.
func (f *Forwarder) ServingNodes(model, version string) []mesh.Node {
	cs := f.servingNodes(model, version)
	out := make([]mesh.Node, len(cs))
	for i, c := range cs {
		out[i] = c.n
	}
	return out
}

// cand is a node that serves a model, with this agent's estimated RTT to
// it (an hour when unknown); first says it is alive and has not failed a
// request of this agent's lately.
type cand struct {
	n     mesh.Node
	rtt   time.Duration
	first bool
}

// siteRTT bounds the distance the forwarder assumes to a node of its own
// site: a site is one location's network, and on a busy host the
// coordinates can take CPU delay for distance (two nodes of one site
// estimated tens of milliseconds apart), which would send a request to
// another site past the replica next door.
const siteRTT = 2 * time.Millisecond

// servingNodes is ServingNodes with each node's RTT.
func (f *Forwarder) servingNodes(model, version string) []cand {
	var cs []cand
	self := f.cfg.Mesh.ID()
	nodes := f.cfg.Mesh.Nodes()
	site := ""
	for _, n := range nodes {
		if n.ID == self {
			site = n.Site
		}
	}
	for _, n := range nodes {
		if !live(n) || n.ID == self || n.Addrs.Data == "" {
			continue
		}
		if !serves(n, model, version) || !f.vouched(n, model, false) {
			continue
		}
		rtt, err := safe.RTT(f.cfg.Mesh, f.cfg.Mesh.Name(), n.Name)
		if err != nil {
			rtt = time.Hour // unknown distance (or a coordinate that cannot be compared): try it last
		}
		if site != "" && n.Site == site {
			rtt = min(rtt, siteRTT)
		}
		cs = append(cs, cand{n, rtt, n.Status == mesh.StatusAlive && !f.isEjected(n.Name)})
	}
	// Alive nodes first, nearest first; suspect and ejected ones last, as
	// a fallback.
	sort.SliceStable(cs, func(i, j int) bool {
		if a, b := cs[i].first, cs[j].first; a != b {
			return a
		}
		return cs[i].rtt < cs[j].rtt
	})
	return cs
}

// byLoad orders the nodes a request may go to: first the one chosen by
// the power of two choices, then the rest nearest first (tried in turn
// when one answers 404 or not in time). Two alive nodes within the
// model's SLO (all alive ones when none is), of those that have not
// failed a request lately, are drawn at random, each with a
// weight of 1/(RTT + 1 ms), so near ones are drawn far more often; of the
// two, the request goes to the one it would expect an answer from first:
// RTT plus the node's reported median handling time for itself and each
// request ahead of it (in flight there at its last traffic report, and
// sent from here and not answered yet). With no load reported anywhere
// this is the nearer of the two; a busy near node sheds requests to
// idle ones a few milliseconds further away, and herds of agents reading
// the same stale report spread over two nodes, not one.
func (f *Forwarder) byLoad(cs []cand, model, version string) []mesh.Node {
	out := make([]mesh.Node, len(cs))
	for i, c := range cs {
		out[i] = c.n
	}
	alive := 0
	for alive < len(cs) && cs[alive].first {
		alive++
	}
	if f.cfg.SLO != nil {
		// Only replicas within the tightest SLO of the services that
		// serve the model compete, while one is (the alive ones are
		// nearest first).
		if slo := f.cfg.SLO(model); slo > 0 {
			in := 0
			for in < alive && cs[in].rtt <= slo {
				in++
			}
			if in > 0 {
				alive = in
			}
		}
	}
	if alive < 2 {
		return out
	}
	weights := make([]float64, alive)
	total := 0.0
	for i := range weights {
		weights[i] = 1 / (float64(cs[i].rtt)/float64(time.Millisecond) + 1)
		total += weights[i]
	}
	a := f.drawWeighted(weights, total, -1)
	b := f.drawWeighted(weights, total-weights[a], a)
	pick := a
	if ea, eb := f.expected(cs[a], model, version), f.expected(cs[b], model, version); eb < ea || (eb == ea && cs[b].rtt < cs[a].rtt) {
		pick = b
	}
	chosen := out[pick]
	copy(out[1:pick+1], out[:pick])
	out[0] = chosen
	return out
}

// drawWeighted draws an index of weights (summing to total, less the one
// at skip, which is never drawn; -1 for none) with probability in
// proportion to its weight.
func (f *Forwarder) drawWeighted(weights []float64, total float64, skip int) int {
	x := f.draw() * total
	last := -1
	for i, w := range weights {
		if i == skip {
			continue
		}
		last = i
		if x < w {
			return i
		}
		x -= w
	}
	return last // rounding
}

// expected is how long a request sent to c now would take to be answered,
// by what this agent knows: the RTT, and the node's median handling time
// for this request and each one ahead of it.
func (f *Forwarder) expected(c cand, model, version string) time.Duration {
	var p50 float64 // milliseconds
	var ahead int64
	for _, t := range c.n.Traffic {
		if name, ver, _ := strings.Cut(t.Model, "@"); name == model && (version == "" || ver == version) {
			p50 = max(p50, t.P50)
			ahead += t.Inflight
		}
	}
	ahead += f.outstanding(c.n.Name).Load()
	return c.rtt + time.Duration(p50*float64(time.Millisecond))*time.Duration(1+ahead)
}

// outstanding is the counter of requests sent to the node named name and
// not answered yet.
func (f *Forwarder) outstanding(name string) *atomic.Int64 {
	v, ok := f.sent.Load(name)
	if !ok {
		v, _ = f.sent.LoadOrStore(name, new(atomic.Int64))
	}
	return v.(*atomic.Int64)
}

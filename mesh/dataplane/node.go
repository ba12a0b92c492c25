package dataplane

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// ErrClosed is returned by a closed Node.
var ErrClosed = errors.New("dataplane: node closed")

// Node serves and pulls artifact blobs. It is safe for concurrent use.
type Node struct {
	cfg   Config
	store *storage.Store
	log   *slog.Logger

	udp *net.UDPConn
	tr  *quic.Transport
	ln  *quic.Listener

	ingress, egress *limiter
	serveSem        chan struct{}
	sendSlots       chan struct{} // nil without an egress cap
	queued          atomic.Int64  // chunk requests sending or waiting to
	pullSem         chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	poolMu sync.Mutex
	pool   map[string]*poolConn

	seeds   seeder
	relay   atomic.Pointer[RelayFunc]
	relayed relayRoutes

	mu        sync.Mutex
	closed    bool
	transfers map[string]*transfer // running pulls by digest
	pulled    map[string]time.Time // blobs this node pulled, and when
	finished  []*transfer          // last finished pulls, oldest first

	stats struct {
		bytesSent, bytesReceived       atomic.Int64
		chunksServed, chunksFetched    atomic.Int64
		chunksRejected, holdersRefused atomic.Int64
		seededRefusals, busyRefusals   atomic.Int64
		forcedServes, substituted      atomic.Int64
		proxied, proxyServed           atomic.Int64
		relayed, relayServed           atomic.Int64
	}
}

// New starts a Node listening on cfg.ListenAddr.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ensureDefaults()
	ua, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("dataplane: listen address %q: %w", cfg.ListenAddr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("dataplane: listen: %w", err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(cfg.ServerTLS, cfg.QUIC)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("dataplane: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, store: cfg.Store,
		log: cfg.Logger.With("component", "dataplane"),
		udp: udp, tr: tr, ln: ln,
		ingress:   newLimiter(cfg.IngressBytesPerSec),
		egress:    newLimiter(cfg.EgressBytesPerSec),
		serveSem:  make(chan struct{}, cfg.MaxConcurrentServes),
		pullSem:   make(chan struct{}, cfg.MaxConcurrentPulls),
		ctx:       ctx,
		cancel:    cancel,
		pool:      map[string]*poolConn{},
		transfers: map[string]*transfer{},
		pulled:    map[string]time.Time{},
	}
	if cfg.EgressBytesPerSec > 0 {
		n.sendSlots = make(chan struct{}, capSendSlots)
	}
	n.wg.Add(1)
	go n.acceptLoop()
	n.log.Info("data plane listening", "addr", udp.LocalAddr().String())
	return n, nil
}

// Addr returns the UDP address the node serves on.
func (n *Node) Addr() net.Addr { return n.udp.LocalAddr() }

// Close stops serving, cancels running pulls (their progress is kept) and
// closes connections. Calling Close twice is safe.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	err := n.ln.Close()
	n.poolMu.Lock()
	for _, pc := range n.pool {
		pc.close()
	}
	n.poolMu.Unlock()
	n.wg.Wait()
	// The transport does not close a socket it was given.
	return errors.Join(err, n.tr.Close(), n.udp.Close())
}

// Stats are a node's cumulative data-plane counters.
type Stats struct {
	// BytesSent and BytesReceived count chunk bodies served and fetched.
	BytesSent, BytesReceived int64
	// ChunksServed and ChunksFetched count chunks.
	ChunksServed, ChunksFetched int64
	// ChunksRejected counts fetched chunks that failed their digest.
	ChunksRejected int64
	// HoldersRejected counts holders dropped from a pull for serving a
	// corrupted chunk.
	HoldersRejected int64
	// SeededRefusals counts chunk requests this node answered "get it from
	// your peers" (super-seeding); ForcedServes counts chunks it sent
	// again because a puller insisted (no peer had them).
	SeededRefusals, ForcedServes int64
	// Substituted counts chunk requests a seed answered with another chunk,
	// one not yet sent to anyone.
	Substituted int64
	// BusyRefusals counts chunk requests refused because the queue under
	// the egress cap was full.
	BusyRefusals int64
	// Proxied counts requests this node sent to peers with RoundTrip and
	// got a response to; ProxyServed counts requests peers sent it.
	Proxied, ProxyServed int64
	// Relayed counts requests this node sent through the relay (to
	// holders with no direct QUIC path); RelayServed counts relayed
	// requests it answered.
	Relayed, RelayServed int64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	return Stats{
		BytesSent:       n.stats.bytesSent.Load(),
		BytesReceived:   n.stats.bytesReceived.Load(),
		ChunksServed:    n.stats.chunksServed.Load(),
		ChunksFetched:   n.stats.chunksFetched.Load(),
		ChunksRejected:  n.stats.chunksRejected.Load(),
		HoldersRejected: n.stats.holdersRefused.Load(),
		SeededRefusals:  n.stats.seededRefusals.Load(),
		ForcedServes:    n.stats.forcedServes.Load(),
		Substituted:     n.stats.substituted.Load(),
		BusyRefusals:    n.stats.busyRefusals.Load(),
		Proxied:         n.stats.proxied.Load(),
		ProxyServed:     n.stats.proxyServed.Load(),
		Relayed:         n.stats.relayed.Load(),
		RelayServed:     n.stats.relayServed.Load(),
	}
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept(n.ctx)
		if err != nil {
			return
		}
		n.wg.Add(1)
		go n.serveConn(c)
	}
}

func (n *Node) serveConn(c *quic.Conn) {
	defer n.wg.Done()
	defer c.CloseWithError(codeNone, "")
	peer := pki.PeerName(c.ConnectionState().TLS)
	go func() {
		select {
		case <-n.ctx.Done():
			c.CloseWithError(codeShutdown, "shutting down")
		case <-c.Context().Done():
		}
	}()
	for {
		s, err := c.AcceptStream(n.ctx)
		if err != nil {
			return
		}
		// The number of streams a peer may open at once is bounded by the
		// QUIC configuration (MaxIncomingStreams); chunk bodies, the
		// expensive part, are bounded by serveSem in serveChunk, so that
		// long-polled "have" requests never hold a serving slot.
		n.wg.Go(func() {
			if err := n.serveStream(s, s.Context(), peer); err != nil {
				s.CancelWrite(codeCanceled)
			} else {
				s.Close()
			}
			s.CancelRead(codeNone)
		})
	}
}

const ioPiece = 256 << 10

// capSendSlots is how many chunk bodies a node with an egress cap sends at
// once.
const capSendSlots = 2

// capQueue is how many more chunk requests a node with an egress cap
// queues behind those being sent before it answers busy.
const capQueue = 4

// chunkBufs keeps chunk buffers for reuse. Unlike a sync.Pool it survives
// garbage collections: chunk buffers are megabytes, and reallocating (and
// zeroing) them after every collection costs more than the transfer's
// hashing. It holds at most 16 buffers.
var chunkBufs = make(chan *[]byte, 16)

func getBuf(n int) *[]byte {
	for {
		select {
		case b := <-chunkBufs:
			if cap(*b) >= n {
				*b = (*b)[:n]
				return b
			}
			// Too small for this blob's chunks: drop it and look again.
			continue
		default:
		}
		b := make([]byte, n)
		return &b
	}
}

func putBuf(b *[]byte) {
	select {
	case chunkBufs <- b:
	default:
	}
}

// serveStream answers one request. gone, when not nil, ends when the peer
// gives up on the answer; a stream without it (a relayed one) is not
// served proxied HTTP requests.
func (n *Node) serveStream(s io.ReadWriter, gone context.Context, peer string) error {
	var op [1]byte
	if _, err := io.ReadFull(s, op[:]); err != nil {
		return err
	}
	switch op[0] {
	case opChunk:
		var req [32 + 8 + 4 + 1]byte
		if _, err := io.ReadFull(s, req[:]); err != nil {
			return err
		}
		digest := hex.EncodeToString(req[:32])
		off := int64(binary.BigEndian.Uint64(req[32:]))
		length := int(binary.BigEndian.Uint32(req[40:]))
		return n.serveChunk(s, peer, digest, off, length, req[44]&flagForce != 0)
	case opHave:
		var req [32 + 4]byte
		if _, err := io.ReadFull(s, req[:]); err != nil {
			return err
		}
		return n.serveHave(s, hex.EncodeToString(req[:32]), int(binary.BigEndian.Uint32(req[32:])))
	case opDone:
		var req [32]byte
		if _, err := io.ReadFull(s, req[:]); err != nil {
			return err
		}
		n.seeds.finished(hex.EncodeToString(req[:]), peer)
		_, err := s.Write(header(statusOK, 0))
		return err
	case opHTTP:
		if gone == nil {
			return errors.New("dataplane: proxied HTTP requests are not served through the relay")
		}
		n.stats.proxyServed.Add(1)
		return n.serveHTTP(s, gone, peer)
	case opManifest:
		kind, err := readString(s)
		if err != nil {
			return err
		}
		name, err := readString(s)
		if err != nil {
			return err
		}
		version, err := readString(s)
		if err != nil {
			return err
		}
		m, err := n.store.Manifest(storage.Kind(kind), name, version)
		if err != nil {
			_, err = s.Write(header(statusMissing, 0))
			return err
		}
		body, _ := json.Marshal(m)
		if _, err := s.Write(header(statusOK, len(body))); err != nil {
			return err
		}
		_, err = s.Write(body)
		return err
	default:
		return fmt.Errorf("dataplane: unknown opcode %d", op[0])
	}
}

// serveChunk sends [off, off+length) of a blob: from the whole blob if held,
// else from a running download if that range is a verified chunk.
func (n *Node) serveChunk(s io.Writer, peer, digest string, off int64, length int, force bool) error {
	if length <= 0 || length > maxBody {
		_, err := s.Write(header(statusError, 0))
		return err
	}
	select {
	case n.serveSem <- struct{}{}:
		defer func() { <-n.serveSem }()
	case <-n.ctx.Done():
		return n.ctx.Err()
	}
	if n.sendSlots != nil && !force {
		// A short queue keeps each chunk's wait short; pullers take a
		// busy holder's chunks elsewhere.
		if n.queued.Add(1) > capSendSlots+capQueue {
			n.queued.Add(-1)
			n.stats.busyRefusals.Add(1)
			_, err := s.Write(header(statusBusy, 0))
			return err
		}
		defer n.queued.Add(-1)
	}
	bp := getBuf(length)
	defer putBuf(bp)
	data, size, ok := n.readRange(digest, off, *bp)
	if !ok {
		_, err := s.Write(header(statusMissing, 0))
		return err
	}
	if size > 0 && !n.pulledRecently(digest) {
		// A whole blob this node did not just pull itself (it is an
		// origin): seed it, each chunk to one puller, until every chunk
		// has gone out once. A node that just pulled the blob is one of
		// the swarm and serves whatever it is asked.
		done, ok, alt := n.seeds.begin(digest, off, int64(length), size, peer, force, n.cfg.SeedWindow)
		if !ok && alt.length > 0 {
			// Send a chunk that has not gone out yet instead: the origin
			// stays busy with new chunks while the pullers trade the rest.
			if b := (*bp)[:cap(*bp)]; int64(len(b)) >= alt.length {
				if d, _, rok := n.readRange(digest, alt.off, b[:alt.length]); rok {
					data, off, ok = d, alt.off, true
					n.stats.substituted.Add(1)
				}
			}
			if !ok {
				done()
			}
		}
		if !ok {
			n.stats.seededRefusals.Add(1)
			_, err := s.Write(header(statusSeeded, 0))
			return err
		}
		defer done()
	}
	if force {
		n.stats.forcedServes.Add(1)
	}
	// The body's offset comes first: a seed may answer with another chunk.
	var offb [8]byte
	binary.BigEndian.PutUint64(offb[:], uint64(off))
	if _, err := s.Write(append(header(statusOK, len(data)), offb[:]...)); err != nil {
		return err
	}
	if n.sendSlots != nil {
		// Under a cap, send few chunks at a time at full rate rather than
		// all of them at a fraction: each chunk lands sooner, so pullers can
		// pass it on to their peers sooner.
		select {
		case n.sendSlots <- struct{}{}:
			defer func() { <-n.sendSlots }()
		case <-n.ctx.Done():
			return n.ctx.Err()
		}
	}
	for len(data) > 0 {
		k := min(len(data), ioPiece)
		if err := n.egress.wait(n.ctx, k); err != nil {
			return err
		}
		w, err := s.Write(data[:k])
		n.stats.bytesSent.Add(int64(w))
		if err != nil {
			return err
		}
		data = data[k:]
	}
	n.stats.chunksServed.Add(1)
	return nil
}

// readRange reads [off, off+len(buf)) of a blob: from the whole blob if
// held (size is then its size), else from a running download if that range
// is a verified chunk (size 0).
func (n *Node) readRange(digest string, off int64, buf []byte) (data []byte, size int64, ok bool) {
	if n.store.Has(digest) {
		f, err := os.Open(n.store.BlobPath(digest))
		if err == nil {
			defer f.Close()
			fi, err := f.Stat()
			if err == nil {
				if _, err := f.ReadAt(buf, off); err == nil {
					return buf, fi.Size(), true
				}
			}
		}
	}
	p := n.store.Partial(digest)
	if p == nil {
		return nil, 0, false
	}
	m := p.Manifest()
	if off%m.ChunkSize != 0 {
		return nil, 0, false
	}
	i := int(off / m.ChunkSize)
	if i >= len(m.Chunks) || m.ChunkLen(i) != int64(len(buf)) {
		return nil, 0, false
	}
	b, err := p.ReadChunk(i, buf)
	return b, 0, err == nil
}

// serveHave answers which chunks of a blob this node holds: the whole blob,
// or the verified chunks of a running download. When the download has no
// more than known chunks, it waits up to HavePoll for the next one.
func (n *Node) serveHave(s io.Writer, digest string, known int) error {
	var timer <-chan time.Time
	for {
		if n.store.Has(digest) {
			if _, err := s.Write(header(statusOK, 1)); err != nil {
				return err
			}
			_, err := s.Write([]byte{1})
			return err
		}
		p := n.store.Partial(digest)
		if p == nil {
			_, err := s.Write(header(statusMissing, 0))
			return err
		}
		bm, changed := p.Bitmap()
		if popcount(bm) > known || timer != nil && isDone(timer) {
			if _, err := s.Write(header(statusOK, 1+len(bm))); err != nil {
				return err
			}
			_, err := s.Write(append([]byte{0}, bm...))
			return err
		}
		if timer == nil {
			t := time.NewTimer(n.cfg.HavePoll)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-changed:
		case <-timer:
			timer = closedTime
		case <-n.ctx.Done():
			return n.ctx.Err()
		}
	}
}

var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

func isDone(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func popcount(bm []byte) int {
	k := 0
	for _, b := range bm {
		for ; b != 0; b &= b - 1 {
			k++
		}
	}
	return k
}

// seedAfterPull is how long after pulling a blob a node serves it as a
// member of the swarm rather than as a seed.
const seedAfterPull = 10 * time.Minute

func (n *Node) pulledRecently(digest string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.pulled[digest]
	return ok && time.Since(at) < seedAfterPull
}

func (n *Node) notePulled(digest string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for d, at := range n.pulled {
		if now.Sub(at) >= seedAfterPull {
			delete(n.pulled, d)
		}
	}
	n.pulled[digest] = now
}

// poolConn is a slot for one pooled client connection, dialled lazily.
type poolConn struct {
	mu sync.Mutex
	c  *quic.Conn
}

func (pc *poolConn) close() {
	pc.mu.Lock()
	if pc.c != nil {
		pc.c.CloseWithError(codeShutdown, "shutting down")
	}
	pc.mu.Unlock()
}

// conn returns the k-th pooled connection to addr, dialling it if it is
// missing or dead.
func (n *Node) conn(ctx context.Context, addr string, k int) (*quic.Conn, error) {
	key := fmt.Sprintf("%s#%d", addr, k)
	n.poolMu.Lock()
	if n.ctx.Err() != nil {
		n.poolMu.Unlock()
		return nil, ErrClosed
	}
	pc, ok := n.pool[key]
	if !ok {
		pc = &poolConn{}
		n.pool[key] = pc
	}
	n.poolMu.Unlock()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.c != nil && pc.c.Context().Err() == nil {
		return pc.c, nil
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dataplane: holder address %q: %w: %w", addr, errDial, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := n.tr.Dial(dctx, ua, n.cfg.ClientTLS, n.cfg.QUIC)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("dataplane: dial %s: %w: %w", addr, errDial, err)
	}
	pc.c = c
	return c, nil
}

// dropConn closes a pooled connection that failed, so the next use redials.
func (n *Node) dropConn(addr string, k int, c *quic.Conn) {
	n.poolMu.Lock()
	pc := n.pool[fmt.Sprintf("%s#%d", addr, k)]
	n.poolMu.Unlock()
	if pc == nil {
		return
	}
	pc.mu.Lock()
	if pc.c == c {
		pc.c.CloseWithError(codeCanceled, "request failed")
		pc.c = nil
	}
	pc.mu.Unlock()
}

// requestQUIC opens a stream on the k-th connection to addr, writes req
// and closes the sending side; the caller reads the response and must
// cancel the stream's reading side when done.
func (n *Node) requestQUIC(ctx context.Context, addr string, k int, req []byte) (*quic.Stream, *quic.Conn, error) {
	c, err := n.conn(ctx, addr, k)
	if err != nil {
		return nil, nil, err
	}
	s, err := n.send(ctx, addr, k, c, req)
	return s, c, err
}

// send is requestQUIC on connection c, the k-th to addr.
func (n *Node) send(ctx context.Context, addr string, k int, c *quic.Conn, req []byte) (*quic.Stream, error) {
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		n.dropConn(addr, k, c)
		return nil, fmt.Errorf("dataplane: open stream to %s: %w", addr, err)
	}
	if _, err := s.Write(req); err != nil {
		s.CancelRead(codeCanceled)
		n.dropConn(addr, k, c)
		return nil, fmt.Errorf("dataplane: request to %s: %w", addr, err)
	}
	s.Close()
	return s, nil
}

// FetchManifest asks the holders, in order, for the manifest of
// kind/name@version ("" or "latest" for the latest they hold) and returns
// the first one that verifies against the store's trusted keys. Manifests
// that do not verify are skipped; if none verifies the last verification
// error is returned (storage.ErrUnknownSigner, storage.ErrBadSignature,
// ...), else storage.ErrNotFound.
func (n *Node) FetchManifest(ctx context.Context, holders []Holder, kind storage.Kind, name, version string) (storage.Manifest, error) {
	var req []byte
	buf := &byteWriter{b: &req}
	buf.Write([]byte{opManifest})
	writeString(buf, string(kind))
	writeString(buf, name)
	writeString(buf, version)
	var lastErr error = fmt.Errorf("%s/%s@%s: %w", kind, name, version, storage.ErrNotFound)
	for _, h := range holders {
		m, err := n.fetchManifest(ctx, h, req)
		if err != nil {
			if !errors.Is(err, storage.ErrNotFound) || !isVerifyErr(lastErr) {
				lastErr = err
			}
			continue
		}
		if err := n.store.VerifyManifest(m); err != nil {
			lastErr = fmt.Errorf("from holder %s: %w", h.ID, err)
			continue
		}
		return m, nil
	}
	return storage.Manifest{}, lastErr
}

func isVerifyErr(err error) bool {
	return errors.Is(err, storage.ErrUnsigned) || errors.Is(err, storage.ErrUnknownSigner) ||
		errors.Is(err, storage.ErrBadSignature) || errors.Is(err, storage.ErrInvalidManifest)
}

func (n *Node) fetchManifest(ctx context.Context, h Holder, req []byte) (storage.Manifest, error) {
	s, err := n.request(ctx, h, 0, req)
	if err != nil {
		return storage.Manifest{}, err
	}
	defer s.done()
	st, ln, err := readHeader(s)
	if err != nil {
		return storage.Manifest{}, fmt.Errorf("dataplane: manifest from %s: %w", h.ID, err)
	}
	if st != statusOK {
		return storage.Manifest{}, fmt.Errorf("holder %s: %w", h.ID, storage.ErrNotFound)
	}
	body := make([]byte, ln)
	if _, err := io.ReadFull(s, body); err != nil {
		return storage.Manifest{}, fmt.Errorf("dataplane: manifest from %s: %w", h.ID, err)
	}
	var m storage.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return storage.Manifest{}, fmt.Errorf("dataplane: manifest from %s: %w", h.ID, err)
	}
	return m, nil
}

type byteWriter struct{ b *[]byte }

func (w *byteWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mesh/strata/internal/backoff"
	"github.com/strata-mesh/strata/storage"
)

// pullSeq tells pulls apart in their random seeds.
var pullSeq atomic.Uint64

// Pull errors.
var (
	// ErrNoHolders is returned when a pull has no holder left to ask: none
	// given, or every one rejected for serving corrupted chunks.
	ErrNoHolders = errors.New("dataplane: no usable holder")
	// ErrStalled is returned when no chunk arrived for Config.RetryTimeout.
	// What was fetched is kept; a later Pull resumes from it.
	ErrStalled = errors.New("dataplane: pull made no progress")
)

var (
	errMissing = errors.New("dataplane: holder does not have the chunk")
	errSeeded  = errors.New("dataplane: holder sent the chunk to a peer")
	errBusy    = errors.New("dataplane: holder busy")
)

// seededForceAfter is how many "get it from a peer" answers for one chunk
// a puller accepts from a holder before it insists (the peer that got the
// chunk may not be among its holders, or may have failed).
const seededForceAfter = 3

// holderBusyPause is how long a puller leaves a busy holder alone.
const holderBusyPause = 100 * time.Millisecond

// Holder is a node that may hold an artifact.
type Holder struct {
	// ID names the holder in statuses and errors (its node ID).
	ID string `json:"id"`
	// Addr is its data-plane UDP address, host:port; empty when it can
	// only be reached through the node's relay (Node.SetRelay).
	Addr string `json:"addr"`
	// Peer, when set, is the holder's libp2p peer ID: where its Addr does
	// not answer (a holder in another site, behind a NAT), the pull
	// reaches it through the node's relay (Node.SetRelay).
	Peer string `json:"peer,omitempty"`
}

// PullRequest says what to pull and from whom.
type PullRequest struct {
	// Manifest is the manifest to pull, if the caller has it; it must
	// verify against the store's trusted keys. When Manifest.Digest is
	// empty the manifest of Kind/Name@Version is fetched from the holders.
	Manifest storage.Manifest
	// Kind, Name and Version name the artifact when Manifest is empty.
	// Version "" or "latest" means the latest a holder has.
	Kind          storage.Kind
	Name, Version string
	// Holders are the nodes to pull from, nearest (lowest RTT) first. The
	// pull spreads chunks across all of them, preferring chunks few of them
	// hold, and fails over between them. Holders still pulling the same
	// blob serve the chunks they have verified.
	Holders []Holder
	// Progress, if set, is called every Config.ProgressInterval and once at
	// the end, from one goroutine; it must not block for long.
	Progress func(TransferStatus)
}

// SourceStatus is what one holder contributed to a pull.
type SourceStatus struct {
	// ID and Addr name the holder.
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Bytes and Chunks count verified chunks fetched from it.
	Bytes  int64 `json:"bytes"`
	Chunks int   `json:"chunks"`
	// Rejected counts chunks from it that failed their digest; one is
	// enough to drop the holder from the pull (chunks already in flight on
	// its other streams are counted too).
	Rejected int `json:"rejected"`
	// Failures counts requests to it that failed (network, restarts).
	Failures int `json:"failures"`
	// State is SourceActive, SourceRejected or SourceUnreachable.
	State string `json:"state"`
}

// Source states.
const (
	SourceActive      = "active"
	SourceRejected    = "rejected"
	SourceUnreachable = "unreachable"
)

// Transfer states.
const (
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// TransferStatus is a snapshot of one pull.
type TransferStatus struct {
	// Digest and Ref name the blob and its manifest (kind/name@version).
	Digest string `json:"digest"`
	Ref    string `json:"ref"`
	// BytesDone counts verified bytes, including Resumed; BytesTotal is
	// the blob's size.
	BytesDone  int64 `json:"bytes_done"`
	BytesTotal int64 `json:"bytes_total"`
	// Resumed counts bytes found verified from an earlier attempt.
	Resumed int64 `json:"resumed"`
	// Fetched counts chunk bytes received in this attempt, including
	// rejected ones.
	Fetched int64 `json:"fetched"`
	// RateBytesPerSec is the mean receive rate of this attempt.
	RateBytesPerSec float64 `json:"rate_bytes_per_sec"`
	// Started is when this attempt began; Elapsed how long it has run.
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Sources lists the holders and what each gave.
	Sources []SourceStatus `json:"sources"`
	// State is StateRunning, StateDone or StateFailed; Error says why a
	// pull failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// PullResult is what a finished pull did.
type PullResult struct {
	// Manifest is the verified manifest of the blob now held.
	Manifest storage.Manifest
	// AlreadyHeld is true when the blob was held before the pull.
	AlreadyHeld bool
	// Status is the pull's final status (bytes, sources, rate).
	Status TransferStatus
}

type holderState struct {
	h        Holder
	have     []byte // nil: not known yet
	complete bool
	rejected bool
	bytes    int64
	chunks   int
	badCount int
	failures int
	lastErr  error
	// deferred holds chunks this holder told us to fetch from a peer, and
	// until when to leave them to the peers; seeded counts such answers.
	deferred map[int]time.Time
	seeded   map[int]int
	// inflight counts requests to it now; retryAt is when it may be asked
	// again after a failure; fails counts consecutive failures.
	inflight int
	retryAt  time.Time
	fails    int
	busy     int // consecutive busy answers
}

func (hs *holderState) has(i int) bool {
	return hs.complete || hs.have != nil && i/8 < len(hs.have) && hs.have[i/8]&(1<<(i%8)) != 0
}

const (
	chunkMissing byte = iota
	chunkInFlight
	chunkDone
)

// transfer is one running pull.
type transfer struct {
	n       *Node
	m       storage.Manifest
	p       *storage.Partial
	started time.Time
	prog    func(TransferStatus)
	ctx     context.Context
	cancel  context.CancelFunc

	fetched atomic.Int64

	mu       sync.Mutex
	state    []byte
	left     int
	inflight int
	maxIn    int
	rng      *rand.Rand
	perHold  int
	avail    []int // per chunk: usable holders known to have it
	gen      uint64
	scanned  uint64 // gen of the last scan that found nothing
	holders  []*holderState
	wake     chan struct{}
	finished bool
	err      error
	lastGood time.Time
	final    *TransferStatus

	done chan struct{} // closed when the pull has ended
}

// Pull fetches an artifact's blob into the store unless it is held already,
// and returns once the whole blob is verified and installed. A pull of a
// blob another Pull is already fetching waits for that one. Pulls beyond
// Config.MaxConcurrentPulls wait for a slot. On failure (ctx, ErrStalled,
// ErrNoHolders, a manifest that does not verify) the verified chunks stay
// on disk and the next Pull of the same blob resumes from them.
func (n *Node) Pull(ctx context.Context, req PullRequest) (PullResult, error) {
	m := req.Manifest
	if m.Digest == "" {
		var err error
		m, err = n.FetchManifest(ctx, req.Holders, req.Kind, req.Name, req.Version)
		if err != nil {
			return PullResult{}, err
		}
	}
	if err := n.store.VerifyManifest(m); err != nil {
		return PullResult{}, err
	}
	if n.store.Has(m.Digest) {
		if err := n.store.AddManifest(m); err != nil {
			return PullResult{}, err
		}
		return PullResult{Manifest: m, AlreadyHeld: true, Status: TransferStatus{
			Digest: m.Digest, Ref: m.Ref(), BytesDone: m.Size, BytesTotal: m.Size, State: StateDone,
		}}, nil
	}
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return PullResult{}, ErrClosed
		}
		other, running := n.transfers[m.Digest]
		if !running {
			break
		}
		n.mu.Unlock()
		select {
		case <-other.done:
			if other.err == nil {
				return PullResult{Manifest: m, AlreadyHeld: true, Status: *other.final}, nil
			}
			// The other pull failed; try ourselves.
		case <-ctx.Done():
			return PullResult{}, ctx.Err()
		}
	}
	t := &transfer{n: n, m: m, prog: req.Progress, done: make(chan struct{}), wake: make(chan struct{})}
	n.transfers[m.Digest] = t
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.transfers, m.Digest)
		n.recordFinished(t)
		n.mu.Unlock()
		close(t.done)
	}()

	select {
	case n.pullSem <- struct{}{}:
		defer func() { <-n.pullSem }()
	case <-ctx.Done():
		t.err = ctx.Err()
		return PullResult{}, t.err
	case <-n.ctx.Done():
		t.err = ErrClosed
		return PullResult{}, t.err
	}
	st, err := t.run(ctx, req.Holders)
	t.err = err
	if err != nil {
		return PullResult{Manifest: m, Status: st}, err
	}
	return PullResult{Manifest: m, Status: st}, nil
}

func (t *transfer) run(ctx context.Context, holders []Holder) (TransferStatus, error) {
	n := t.n
	p, err := n.store.OpenPartial(t.m)
	if err != nil {
		return TransferStatus{}, err
	}
	t.p = p
	t.started = time.Now()
	t.lastGood = t.started
	t.state = make([]byte, len(t.m.Chunks))
	t.rng = rand.New(rand.NewPCG(uint64(t.started.UnixNano()), pullSeq.Add(1)))
	t.perHold = n.cfg.StreamsPerHolder * n.cfg.ConnsPerHolder
	t.maxIn = n.cfg.MaxChunksInFlight
	if t.maxIn == 0 {
		t.maxIn = min(t.perHold*max(len(holders), 1), 16)
	}
	t.avail = make([]int, len(t.m.Chunks))
	for i := range t.state {
		if p.Has(i) {
			t.state[i] = chunkDone
		} else {
			t.left++
		}
	}
	self := n.Addr().String()
	for _, h := range holders {
		if h.Addr == self {
			continue
		}
		t.holders = append(t.holders, &holderState{h: h})
	}
	t.ctx, t.cancel = context.WithCancel(ctx)
	stopNode := context.AfterFunc(n.ctx, t.cancel)
	defer stopNode()

	var wg sync.WaitGroup
	if t.left > 0 {
		if len(t.holders) == 0 {
			t.finish(ErrNoHolders)
		}
		for _, hs := range t.holders {
			wg.Go(func() { t.pollHave(hs) })
		}
		for k := 0; k < t.maxIn; k++ {
			wg.Go(func() { t.worker(k % n.cfg.ConnsPerHolder) })
		}
	} else {
		t.finish(nil)
	}
	wg.Go(func() { t.watch() })
	wg.Wait()
	t.cancel()

	err = t.err
	if err == nil {
		err = p.Commit()
		if err == nil {
			n.notePulled(t.m.Digest)
		}
		t.tellDone()
	} else {
		p.Close()
	}
	st := t.status()
	if err != nil {
		st.State, st.Error = StateFailed, err.Error()
	} else {
		st.State = StateDone
		n.log.Info("artifact pulled", "ref", t.m.Ref(), "digest", t.m.Digest, "bytes", t.m.Size,
			"fetched", st.Fetched, "resumed", st.Resumed, "sources", len(st.Sources), "elapsed", st.Elapsed)
	}
	t.mu.Lock()
	t.final = &st
	t.mu.Unlock()
	if t.prog != nil {
		t.prog(st)
	}
	return st, err
}

// finish ends the pull with err (nil: every chunk verified). The first call
// wins.
func (t *transfer) finish(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return
	}
	t.finished = true
	t.err = err
	t.broadcast()
	if t.cancel != nil {
		t.cancel()
	}
}

// broadcast wakes waiters; t.mu must be held.
func (t *transfer) broadcast() {
	t.gen++
	close(t.wake)
	t.wake = make(chan struct{})
}

// recount recomputes t.avail; t.mu must be held. It runs when a holder's
// view changes, which is rare next to picks.
func (t *transfer) recount() {
	for i := range t.avail {
		t.avail[i] = 0
	}
	for _, hs := range t.holders {
		if hs.rejected {
			continue
		}
		for i := range t.avail {
			if hs.has(i) {
				t.avail[i]++
			}
		}
	}
}

// pick chooses the next chunk to fetch and the holder to fetch it from.
// Chunks go rarest first (held by the fewest holders, so an origin's
// scarce chunks spread before common ones). Among equals: in order from a
// single holder, so that the whole-blob hash keeps pace with the transfer;
// at random from several, so that pullers sharing holders ask them for
// different chunks. The holder is the
// least loaded of those that have the chunk, nearest first among equals,
// skipping holders that failed recently and chunks a holder said to fetch
// from a peer. It blocks until a pair is available and returns false when
// the pull has ended.
func (t *transfer) pick() (int, *holderState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if t.finished || t.ctx.Err() != nil {
			return 0, nil, false
		}
		var retryAt time.Time
		if t.inflight < t.maxIn && t.scanned != t.gen {
			now := time.Now()
			later := func(at time.Time) {
				if retryAt.IsZero() || at.Before(retryAt) {
					retryAt = at
				}
			}
			eligible := func(hs *holderState, i int) bool {
				if hs.rejected || !hs.has(i) || hs.inflight >= t.perHold {
					return false
				}
				if now.Before(hs.retryAt) {
					later(hs.retryAt)
					return false
				}
				if until, ok := hs.deferred[i]; ok && now.Before(until) {
					later(until)
					return false
				}
				return true
			}
			best, bestAvail := -1, 1<<30
			var bestHolder *holderState
			nc := len(t.state)
			start := 0
			if len(t.holders) > 1 {
				start = t.rng.IntN(nc)
			}
			for j := 0; j < nc && bestAvail > 1; j++ {
				i := (start + j) % nc
				if t.state[i] != chunkMissing || t.avail[i] == 0 || t.avail[i] >= bestAvail {
					continue
				}
				var h *holderState
				for _, hs := range t.holders {
					if eligible(hs, i) && (h == nil || hs.inflight < h.inflight) {
						h = hs
					}
				}
				if h != nil {
					best, bestAvail, bestHolder = i, t.avail[i], h
				}
			}
			if best >= 0 {
				t.state[best] = chunkInFlight
				t.inflight++
				bestHolder.inflight++
				delete(bestHolder.deferred, best)
				return best, bestHolder, true
			}
			if retryAt.IsZero() {
				// Nothing to do until something changes.
				t.scanned = t.gen
			}
		}
		wake := t.wake
		t.mu.Unlock()
		var timer <-chan time.Time
		if !retryAt.IsZero() {
			tm := time.NewTimer(time.Until(retryAt))
			timer = tm.C
			defer tm.Stop()
		}
		select {
		case <-wake:
		case <-timer:
		case <-t.ctx.Done():
		}
		t.mu.Lock()
	}
}

// worker fetches chunks until the pull ends, over the k-th connection to
// whichever holder pick chooses.
func (t *transfer) worker(k int) {
	for {
		i, hs, ok := t.pick()
		if !ok {
			return
		}
		got := i
		bp, err := t.fetch(hs, k, i, &got)
		if err == nil && got != i {
			// The holder sent another chunk: take it if it is still wanted,
			// and put the one asked for back.
			t.mu.Lock()
			t.state[i] = chunkMissing
			want := t.state[got] == chunkMissing
			if want {
				t.state[got] = chunkInFlight
			} else {
				t.inflight--
				hs.inflight--
			}
			t.broadcast()
			t.mu.Unlock()
			if !want {
				putBuf(bp)
				continue
			}
			i = got
		}
		if err == nil {
			werr := t.p.WriteChunk(i, *bp)
			putBuf(bp)
			if errors.Is(werr, storage.ErrDigestMismatch) {
				t.reject(hs, i)
				continue
			}
			if werr != nil {
				t.finish(werr)
				return
			}
			t.mu.Lock()
			t.state[i] = chunkDone
			t.inflight--
			hs.inflight--
			hs.fails = 0
			hs.busy = 0
			t.left--
			hs.bytes += t.m.ChunkLen(i)
			hs.chunks++
			t.lastGood = time.Now()
			left := t.left
			t.broadcast()
			t.mu.Unlock()
			t.n.stats.chunksFetched.Add(1)
			if left == 0 {
				t.finish(nil)
			}
			continue
		}
		t.mu.Lock()
		t.state[i] = chunkMissing
		t.inflight--
		hs.inflight--
		switch {
		case errors.Is(err, errBusy):
			// 100ms doubling to 400ms while it stays busy.
			hs.busy++
			hs.retryAt = time.Now().Add(holderBusyPause << min(hs.busy-1, 2))
		case errors.Is(err, errSeeded):
			if hs.deferred == nil {
				hs.deferred, hs.seeded = map[int]time.Time{}, map[int]int{}
			}
			hs.seeded[i]++
			hs.deferred[i] = time.Now().Add(time.Duration(hs.seeded[i]) * 500 * time.Millisecond)
		case errors.Is(err, errMissing):
			if !hs.complete && hs.have != nil {
				hs.have[i/8] &^= 1 << (i % 8)
				t.recount()
			}
		case t.ctx.Err() == nil:
			hs.failures++
			hs.fails++
			hs.lastErr = err
			// Back off from this holder: 50ms doubling to 2s. Other
			// holders take over its chunks meanwhile.
			hs.retryAt = time.Now().Add(min(50*time.Millisecond<<min(hs.fails-1, 6), 2*time.Second))
		}
		t.broadcast()
		t.mu.Unlock()
	}
}

// backoff waits 50ms doubling to 2s after consecutive failures; false if
// the pull ended meanwhile.
func (t *transfer) backoff(failures int) bool {
	timer := time.NewTimer(backoff.Exp(50*time.Millisecond, 2*time.Second, failures))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.ctx.Done():
		return false
	}
}

func (t *transfer) reject(hs *holderState, i int) {
	t.n.stats.chunksRejected.Add(1)
	t.mu.Lock()
	t.state[i] = chunkMissing
	t.inflight--
	hs.inflight--
	hs.badCount++
	if !hs.rejected {
		t.n.stats.holdersRefused.Add(1)
		t.n.log.Warn("holder served a corrupted chunk; dropped from the pull",
			"holder", hs.h.ID, "ref", t.m.Ref(), "chunk", i)
	}
	hs.rejected = true
	t.recount()
	usable := 0
	for _, o := range t.holders {
		if !o.rejected {
			usable++
		}
	}
	t.broadcast()
	t.mu.Unlock()
	if usable == 0 {
		t.finish(fmt.Errorf("%s: %w: every holder served corrupted chunks", t.m.Ref(), ErrNoHolders))
	}
}

// fetch requests chunk i from hs over its k-th connection and returns the
// body in a pooled buffer.
//
// A seed may answer with another chunk (see seeder); *got says which
// chunk the body is.
func (t *transfer) fetch(hs *holderState, k, i int, got *int) (*[]byte, error) {
	n := t.n
	length := int(t.m.ChunkLen(i))
	req := make([]byte, 1+32+8+4+1)
	req[0] = opChunk
	if err := putDigest(req[1:], t.m.Digest); err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint64(req[33:], uint64(int64(i)*t.m.ChunkSize))
	binary.BigEndian.PutUint32(req[41:], uint32(length))
	t.mu.Lock()
	// Insist only when no other holder is known to have the chunk: if a
	// peer has it, it is the peer's to send.
	if hs.seeded[i] >= seededForceAfter && t.avail[i] <= 1 {
		req[45] = flagForce
	}
	t.mu.Unlock()
	s, err := n.request(t.ctx, hs.h, k, req)
	if err != nil {
		return nil, err
	}
	defer s.done()
	st, ln, err := readHeader(s)
	if err != nil {
		return nil, fmt.Errorf("dataplane: chunk %d from %s: %w", i, hs.h.ID, err)
	}
	if st == statusMissing {
		return nil, errMissing
	}
	if st == statusSeeded {
		return nil, errSeeded
	}
	if st == statusBusy {
		return nil, errBusy
	}
	if st != statusOK {
		return nil, fmt.Errorf("dataplane: chunk %d from %s: status %d", i, hs.h.ID, st)
	}
	var offb [8]byte
	if _, err := io.ReadFull(s, offb[:]); err != nil {
		return nil, fmt.Errorf("dataplane: chunk %d from %s: %w", i, hs.h.ID, err)
	}
	// A seed may send another chunk than the one asked for.
	off := int64(binary.BigEndian.Uint64(offb[:]))
	if off%t.m.ChunkSize != 0 || off >= t.m.Size && t.m.Size > 0 || int64(ln) != t.m.ChunkLen(int(off/t.m.ChunkSize)) {
		return nil, fmt.Errorf("dataplane: chunk %d from %s: body of %d bytes at offset %d", i, hs.h.ID, ln, off)
	}
	*got = int(off / t.m.ChunkSize)
	length = int(ln)
	bp := getBuf(length)
	b := *bp
	for off := 0; off < length; {
		k := min(length-off, ioPiece)
		if err := n.ingress.wait(t.ctx, k); err != nil {
			putBuf(bp)
			return nil, err
		}
		r, err := io.ReadFull(s, b[off:off+k])
		off += r
		t.fetched.Add(int64(r))
		n.stats.bytesReceived.Add(int64(r))
		if err != nil {
			putBuf(bp)
			return nil, fmt.Errorf("dataplane: chunk %d from %s: %w", i, hs.h.ID, err)
		}
	}
	return bp, nil
}

// pollHave keeps hs's view of which chunks it holds current, until it is
// known to hold them all or the pull ends. Holders long-poll, so a peer's
// new chunks are learnt about as they land.
func (t *transfer) pollHave(hs *holderState) {
	req := make([]byte, 1+32+4)
	req[0] = opHave
	if err := putDigest(req[1:], t.m.Digest); err != nil {
		return
	}
	failures := 0
	for {
		t.mu.Lock()
		if t.finished || hs.rejected || hs.complete {
			t.mu.Unlock()
			return
		}
		binary.BigEndian.PutUint32(req[33:], uint32(popcount(hs.have)))
		t.mu.Unlock()
		complete, bm, err := t.have(hs, req)
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			failures++
			t.mu.Lock()
			hs.failures++
			hs.lastErr = err
			t.mu.Unlock()
			if !t.backoff(failures) {
				return
			}
			continue
		}
		failures = 0
		t.mu.Lock()
		hs.complete = complete
		if bm != nil || hs.have == nil {
			if bm == nil {
				bm = make([]byte, (len(t.m.Chunks)+7)/8)
			}
			hs.have = bm
		}
		t.recount()
		t.broadcast()
		t.mu.Unlock()
		if bm == nil && !complete {
			// The holder has nothing yet; ask again after a while.
			if !t.backoff(4) {
				return
			}
		}
	}
}

func (t *transfer) have(hs *holderState, req []byte) (complete bool, bm []byte, err error) {
	s, err := t.n.request(t.ctx, hs.h, 0, req)
	if err != nil {
		return false, nil, err
	}
	defer s.done()
	st, ln, err := readHeader(s)
	if err != nil {
		return false, nil, err
	}
	if st == statusMissing {
		return false, nil, nil
	}
	if st != statusOK || ln < 1 {
		return false, nil, fmt.Errorf("dataplane: have from %s: status %d", hs.h.ID, st)
	}
	body := make([]byte, ln)
	if _, err := io.ReadFull(s, body); err != nil {
		return false, nil, err
	}
	if body[0] == 1 {
		return true, nil, nil
	}
	if len(body)-1 != (len(t.m.Chunks)+7)/8 {
		return false, nil, fmt.Errorf("dataplane: have from %s: bitmap of %d bytes", hs.h.ID, len(body)-1)
	}
	return false, body[1:], nil
}

// tellDone tells the holders that served this pull that it is over, so
// they stop holding chunks back for it (see seeder). Best effort, bounded.
func (t *transfer) tellDone() {
	req := make([]byte, 1+32)
	req[0] = opDone
	if putDigest(req[1:], t.m.Digest) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.n.ctx, time.Second)
	defer cancel()
	var used []*holderState
	t.mu.Lock()
	for _, hs := range t.holders {
		if hs.chunks > 0 || hs.seeded != nil {
			used = append(used, hs)
		}
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, hs := range used {
		wg.Go(func() {
			s, err := t.n.request(ctx, hs.h, 0, req)
			if err != nil {
				return
			}
			readHeader(s)
			s.done()
		})
	}
	wg.Wait()
}

// watch reports progress and fails the pull when it stalls.
func (t *transfer) watch() {
	tick := time.NewTicker(t.n.cfg.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			if t.ctx.Err() != nil {
				t.finish(t.ctx.Err())
			}
			return
		case <-tick.C:
		}
		t.mu.Lock()
		stalled := time.Since(t.lastGood) > t.n.cfg.RetryTimeout
		t.mu.Unlock()
		if stalled {
			t.finish(fmt.Errorf("%s: %w for %s: %s", t.m.Ref(), ErrStalled, t.n.cfg.RetryTimeout, t.holderErrors()))
			return
		}
		if t.prog != nil {
			t.prog(t.status())
		}
	}
}

func (t *transfer) holderErrors() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, hs := range t.holders {
		if hs.lastErr != nil {
			out = append(out, fmt.Sprintf("%s: %v", hs.h.ID, hs.lastErr))
		}
	}
	if len(out) == 0 {
		return "no holder had the missing chunks"
	}
	return fmt.Sprint(out)
}

func (t *transfer) status() TransferStatus {
	done, resumed, total := int64(0), int64(0), t.m.Size
	if t.p != nil {
		done, resumed, total = t.p.Progress()
	}
	st := TransferStatus{
		Digest: t.m.Digest, Ref: t.m.Ref(),
		BytesDone: done, BytesTotal: total, Resumed: resumed,
		Fetched: t.fetched.Load(), Started: t.started, State: StateRunning,
	}
	if !t.started.IsZero() {
		st.Elapsed = time.Since(t.started)
		if s := st.Elapsed.Seconds(); s > 0 {
			st.RateBytesPerSec = float64(st.Fetched) / s
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.final != nil {
		return *t.final
	}
	for _, hs := range t.holders {
		state := SourceActive
		if hs.rejected {
			state = SourceRejected
		} else if hs.failures > 0 && hs.chunks == 0 && hs.lastErr != nil {
			state = SourceUnreachable
		}
		st.Sources = append(st.Sources, SourceStatus{
			ID: hs.h.ID, Addr: hs.h.Addr, Bytes: hs.bytes, Chunks: hs.chunks,
			Rejected: hs.badCount, Failures: hs.failures, State: state,
		})
	}
	return st
}

const keepFinished = 32

// recordFinished keeps the last finished transfers for Transfers; n.mu
// must be held.
func (n *Node) recordFinished(t *transfer) {
	n.finished = append(n.finished, t)
	if len(n.finished) > keepFinished {
		n.finished = n.finished[len(n.finished)-keepFinished:]
	}
}

// Transfers returns the status of running pulls and of the last 32
// finished ones, running first, each group newest first.
func (n *Node) Transfers() []TransferStatus {
	n.mu.Lock()
	running := make([]*transfer, 0, len(n.transfers))
	for _, t := range n.transfers {
		running = append(running, t)
	}
	finished := append([]*transfer(nil), n.finished...)
	n.mu.Unlock()
	var out []TransferStatus
	sort.Slice(running, func(i, j int) bool { return running[i].started.After(running[j].started) })
	for _, t := range running {
		out = append(out, t.status())
	}
	for i := len(finished) - 1; i >= 0; i-- {
		st := finished[i].status()
		if st.State == StateRunning {
			st.State = StateFailed
			if finished[i].err != nil {
				st.Error = finished[i].err.Error()
			}
		}
		out = append(out, st)
	}
	return out
}

// Pulling returns the digests of the blobs this node is pulling now,
// sorted. Their verified chunks are served to other pullers, so a node may
// advertise them (next to the blobs it holds whole) as partial holdings
// for peer-assisted fan-out.
func (n *Node) Pulling() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.transfers))
	for d := range n.transfers {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

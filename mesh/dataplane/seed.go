package dataplane

import (
	"sync"
	"time"
)

// seeder implements super-seeding (as in BitTorrent): while a holder of a
// whole blob has not yet sent every chunk of it out, it sends each chunk to
// one puller only and answers the others "get it from your peers", so a
// fan-out costs it about one copy and the pullers spread the rest among
// themselves. A chunk counts as sent out while it is being sent and for
// the seed window after. Once every chunk has gone out, it serves anyone.
type seeder struct {
	mu    sync.Mutex
	blobs map[string]*seedBlob
	swept time.Time
}

type seedBlob struct {
	total    int   // chunks in the blob, once known
	chunkLen int64 // their length (but the last's), once known
	chunks   map[int64]*seedState
	last     time.Time
	// active holds when each puller last asked for a chunk of the blob;
	// a puller that said it is done is removed.
	active map[string]time.Time
}

// seedActive is how long after its last request a puller counts as still
// pulling. Only chunks given to pullers still pulling are refused: a puller
// that has finished may not serve the others.
const seedActive = 2 * time.Second

type seedState struct {
	peer    string
	serving int
	last    time.Time
}

func (st *seedState) out(now time.Time, window time.Duration) bool {
	return st.peer != "" && (st.serving > 0 || now.Sub(st.last) < window)
}

// begin decides whether to send the chunk at off (length bytes of a blob of
// size bytes) to peer. On success the caller must call done once the chunk
// is sent.
//
// When it refuses it may offer alt, a chunk not yet out, already marked as
// going to peer: the caller sends that one instead and calls done, or, if
// it cannot, calls done all the same.
func (s *seeder) begin(digest string, off, length, size int64, peer string, force bool, window time.Duration) (done func(), ok bool, alt altChunk) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blobs == nil {
		s.blobs = map[string]*seedBlob{}
	}
	if now.Sub(s.swept) > time.Minute {
		s.swept = now
		for d, b := range s.blobs {
			if now.Sub(b.last) > time.Minute+window {
				delete(s.blobs, d)
			}
		}
	}
	b := s.blobs[digest]
	if b == nil {
		b = &seedBlob{chunks: map[int64]*seedState{}, active: map[string]time.Time{}}
		s.blobs[digest] = b
	}
	b.last = now
	b.active[peer] = now
	if off+length < size && length > 0 {
		b.total = int((size + length - 1) / length)
		b.chunkLen = length
	}
	st := b.chunks[off]
	if st == nil {
		st = &seedState{}
		b.chunks[off] = st
	}
	if window > 0 && !force && st.peer != peer && st.out(now, window) && b.total > 0 &&
		now.Sub(b.active[st.peer]) < seedActive {
		out := 0
		for _, c := range b.chunks {
			if c.out(now, window) {
				out++
			}
		}
		if out < b.total {
			return func() {}, false, s.substitute(b, peer, size, now, window)
		}
	}
	return s.take(st, peer), true, altChunk{}
}

// altChunk is a chunk offered instead of the one asked for.
type altChunk struct{ off, length int64 }

// take marks st as going to peer; s.mu must be held.
func (s *seeder) take(st *seedState, peer string) func() {
	st.peer = peer
	st.serving++
	return func() {
		s.mu.Lock()
		st.serving--
		st.last = time.Now()
		s.mu.Unlock()
	}
}

// substitute picks the first chunk of b not yet out, marks it as going to
// peer and returns it; the zero altChunk if there is none. s.mu must be
// held. The done func of the alternative is folded into the refusal's:
// the caller's done (returned by begin) is a no-op, and the mark expires
// with the seed window.
func (s *seeder) substitute(b *seedBlob, peer string, size int64, now time.Time, window time.Duration) altChunk {
	if b.chunkLen <= 0 {
		return altChunk{}
	}
	for k := 0; k < b.total; k++ {
		off := int64(k) * b.chunkLen
		st := b.chunks[off]
		if st == nil {
			st = &seedState{}
			b.chunks[off] = st
		}
		if st.out(now, window) {
			continue
		}
		st.peer = peer
		st.last = now
		return altChunk{off: off, length: min(b.chunkLen, size-off)}
	}
	return altChunk{}
}

// finished records that peer has finished pulling the blob: chunks given to
// it are no longer held back from others.
func (s *seeder) finished(digest, peer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blobs[digest]; b != nil {
		delete(b.active, peer)
	}
}

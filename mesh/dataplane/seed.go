package dataplane

import (
	"sync"
	"time"
)

// seeder remembers, per chunk (blob digest and offset), which puller this
// node is sending it to or sent it to last, and when. With it a holder
// sends each chunk to one puller and tells the others to fetch it from
// that peer, so a fan-out costs the origin about one copy (the
// "super-seeding" of BitTorrent, where a seed hides what it has already
// given out).
type seeder struct {
	mu     sync.Mutex
	chunks map[seedKey]*seedState
	swept  time.Time
}

type seedKey struct {
	digest string
	off    int64
}

type seedState struct {
	peer    string
	serving int
	last    time.Time
}

// begin decides whether to send the chunk to peer. It refuses when the
// chunk is being sent to another peer, or was within window, unless force.
// On success the caller must call done when the chunk is sent.
func (s *seeder) begin(digest string, off int64, peer string, force bool, window time.Duration) (done func(), ok bool) {
	now := time.Now()
	k := seedKey{digest, off}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chunks == nil {
		s.chunks = map[seedKey]*seedState{}
	}
	if now.Sub(s.swept) > time.Minute {
		s.swept = now
		for k, st := range s.chunks {
			if st.serving == 0 && now.Sub(st.last) > time.Minute {
				delete(s.chunks, k)
			}
		}
	}
	st := s.chunks[k]
	if st == nil {
		st = &seedState{}
		s.chunks[k] = st
	}
	if window > 0 && !force && st.peer != "" && st.peer != peer &&
		(st.serving > 0 || now.Sub(st.last) < window) {
		return nil, false
	}
	st.peer = peer
	st.serving++
	return func() {
		s.mu.Lock()
		st.serving--
		st.last = time.Now()
		s.mu.Unlock()
	}, true
}

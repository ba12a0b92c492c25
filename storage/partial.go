package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"sync"
)

// ErrPartialBusy is returned by OpenPartial when the same blob is already
// being downloaded through another Partial.
var ErrPartialBusy = errors.New("storage: a download of this blob is already open")

// ErrIncomplete is returned by Commit when chunks are still missing.
var ErrIncomplete = errors.New("storage: download incomplete")

// Partial is a resumable download of one blob: a preallocated file in the
// partial directory that chunks are written into in any order, and a
// bitmap of verified chunks kept in the DB. Only Commit makes it a blob.
// It is safe for concurrent use: chunks may be written from many streams.
//
// After a crash or restart, OpenPartial finds the file and the bitmap and
// rehashes every chunk the bitmap claims, so a download resumes from the
// chunks that are really there and verified, whatever the crash lost.
type Partial struct {
	s *Store
	m Manifest
	f *os.File

	mu        sync.Mutex
	done      []byte // bitmap of verified chunks
	nDone     int
	doneBytes int64
	resumed   int64 // bytes found verified at open
	changed   chan struct{}
	closed    bool

	// The whole-blob hash runs behind the writes, over the contiguous
	// prefix of verified chunks, so Commit need not read the blob again.
	whole     hash.Hash
	hashed    int // chunks [0, hashed) are in whole
	kick      chan struct{}
	stop      chan struct{}
	hashDone  chan struct{}
	hashErr   error
	saveKick  chan struct{}
	saveDone  chan struct{}
	closeOnce sync.Once
}

// OpenPartial starts or resumes the download of m's blob. m must verify
// against the trusted keys; it is recorded with AddManifest. It returns
// ErrPartialBusy when a download of the blob is already open. The caller
// must Commit, Close or Abort the Partial.
func (s *Store) OpenPartial(m Manifest) (*Partial, error) {
	if err := s.AddManifest(m); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if _, ok := s.partials[m.Digest]; ok {
		return nil, fmt.Errorf("%s: %w", m.Ref(), ErrPartialBusy)
	}
	f, err := os.OpenFile(s.partialPath(m.Digest), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := f.Truncate(m.Size); err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := preallocate(f, m.Size); err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: %s needs %d bytes: %w", m.Ref(), m.Size, err)
	}
	n := len(m.Chunks)
	p := &Partial{
		s: s, m: m.Clone(), f: f,
		done:     make([]byte, (n+7)/8),
		changed:  make(chan struct{}),
		whole:    sha256.New(),
		kick:     make(chan struct{}, 1),
		saveKick: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		hashDone: make(chan struct{}),
		saveDone: make(chan struct{}),
	}
	if rec, err := s.db.Get([]byte(keyPartial + m.Digest)); err == nil && len(rec) == len(p.done) {
		buf := make([]byte, m.ChunkSize)
		for i := 0; i < n; i++ {
			if rec[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			b := buf[:m.ChunkLen(i)]
			if _, err := f.ReadAt(b, int64(i)*m.ChunkSize); err != nil {
				continue
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) == m.Chunks[i] {
				p.mark(i)
			}
		}
		p.resumed = p.doneBytes
	}
	if err := p.save(append([]byte(nil), p.done...), false); err != nil {
		f.Close()
		return nil, err
	}
	s.partials[m.Digest] = p
	go p.hashLoop()
	go p.saveLoop()
	return p, nil
}

// Partial returns the open download of the digest, or nil. The data plane
// serves verified chunks of open downloads to other pullers.
func (s *Store) Partial(digest string) *Partial {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partials[digest]
}

// Manifest returns the manifest being downloaded.
func (p *Partial) Manifest() Manifest { return p.m.Clone() }

// mark records chunk i as verified. p.mu must be held or p unshared.
func (p *Partial) mark(i int) bool {
	if p.done[i/8]&(1<<(i%8)) != 0 {
		return false
	}
	p.done[i/8] |= 1 << (i % 8)
	p.nDone++
	p.doneBytes += p.m.ChunkLen(i)
	return true
}

// save writes the bitmap bm as the download's progress record.
func (p *Partial) save(bm []byte, sync bool) error {
	b := p.s.db.NewBatch()
	b.Put([]byte(keyPartial+p.m.Digest), bm)
	return b.Commit(sync)
}

// saveLoop keeps the progress record current. It runs beside the writers
// so that no chunk write waits for an fsync: each round saves the latest
// bitmap, synced, and rounds run back to back while chunks keep landing.
// A record that lags (or claims a chunk whose bytes a power cut lost) costs
// a refetch, never a wrong blob: OpenPartial re-verifies what it claims.
func (p *Partial) saveLoop() {
	defer close(p.saveDone)
	for {
		stopping := false
		select {
		case <-p.saveKick:
		case <-p.stop:
			stopping = true
		}
		p.mu.Lock()
		bm := append([]byte(nil), p.done...)
		p.mu.Unlock()
		if err := p.save(bm, true); err != nil {
			p.s.log.Warn("saving download progress failed", "digest", p.m.Digest, "err", err)
		}
		if stopping {
			return
		}
	}
}

// Has reports whether chunk i is written and verified.
func (p *Partial) Has(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return i >= 0 && i < len(p.m.Chunks) && p.done[i/8]&(1<<(i%8)) != 0
}

// Bitmap returns a copy of the verified-chunk bitmap (bit i%8 of byte i/8)
// and a channel closed at the next change.
func (p *Partial) Bitmap() ([]byte, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.done...), p.changed
}

// Progress returns the verified bytes, the bytes found verified when the
// download was opened (resumed from disk), and the total.
func (p *Partial) Progress() (done, resumed, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.doneBytes, p.resumed, p.m.Size
}

// Missing returns the indexes of chunks not yet verified, in order.
func (p *Partial) Missing() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i := range p.m.Chunks {
		if p.done[i/8]&(1<<(i%8)) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// WriteChunk verifies data against chunk i's digest and writes it. A chunk
// that does not verify is not written and ErrDigestMismatch is returned;
// writing a chunk already held is a no-op.
func (p *Partial) WriteChunk(i int, data []byte) error {
	if i < 0 || i >= len(p.m.Chunks) {
		return fmt.Errorf("storage: chunk %d out of range [0,%d)", i, len(p.m.Chunks))
	}
	if int64(len(data)) != p.m.ChunkLen(i) {
		return fmt.Errorf("chunk %d: %d bytes, want %d: %w", i, len(data), p.m.ChunkLen(i), ErrDigestMismatch)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.m.Chunks[i] {
		return fmt.Errorf("chunk %d: %w", i, ErrDigestMismatch)
	}
	if p.Has(i) {
		return nil
	}
	if _, err := p.f.WriteAt(data, int64(i)*p.m.ChunkSize); err != nil {
		return fmt.Errorf("storage: write chunk: %w", err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if !p.mark(i) {
		p.mu.Unlock()
		return nil
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, c := range []chan struct{}{p.kick, p.saveKick} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return nil
}

// ReadChunk reads verified chunk i into buf (which must hold ChunkLen(i)
// bytes) and returns the filled slice; ErrBlobMissing if it is not held.
func (p *Partial) ReadChunk(i int, buf []byte) ([]byte, error) {
	if !p.Has(i) {
		return nil, fmt.Errorf("chunk %d: %w", i, ErrBlobMissing)
	}
	b := buf[:p.m.ChunkLen(i)]
	if _, err := p.f.ReadAt(b, int64(i)*p.m.ChunkSize); err != nil {
		return nil, fmt.Errorf("storage: read chunk: %w", err)
	}
	return b, nil
}

// Complete reports whether every chunk is verified.
func (p *Partial) Complete() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nDone == len(p.m.Chunks)
}

// writebackEvery is how many hashed bytes of a download are handed to
// the kernel's writeback at a time.
const writebackEvery = 16 << 20

func (p *Partial) hashLoop() {
	defer close(p.hashDone)
	buf := make([]byte, p.m.ChunkSize)
	n := len(p.m.Chunks)
	var written int64 // hashed bytes not yet handed to writeback
	for {
		for {
			p.mu.Lock()
			ok := p.hashed < n && p.done[p.hashed/8]&(1<<(p.hashed%8)) != 0
			i := p.hashed
			p.mu.Unlock()
			if !ok {
				break
			}
			b := buf[:p.m.ChunkLen(i)]
			if _, err := p.f.ReadAt(b, int64(i)*p.m.ChunkSize); err != nil {
				p.hashErr = fmt.Errorf("storage: hash: %w", err)
				return
			}
			p.whole.Write(b)
			p.mu.Lock()
			p.hashed++
			p.mu.Unlock()
			// The hashed prefix is final: start writing it to disk now.
			if written += int64(len(b)); written >= writebackEvery {
				startWriteback(p.f, int64(i)*p.m.ChunkSize+int64(len(b))-written, written)
				written = 0
			}
		}
		if p.hashed == n {
			return
		}
		select {
		case <-p.kick:
		case <-p.stop:
			p.hashErr = ErrClosed
			return
		}
	}
}

// Commit turns a complete download into a blob: it checks the whole digest,
// fsyncs, renames into the blob directory, fsyncs the directory, indexes the
// blob and drops the progress record. It returns ErrIncomplete while chunks
// are missing. If the whole digest does not match (a manifest whose chunk
// list disagrees with its digest) the download is discarded and
// ErrDigestMismatch returned.
func (p *Partial) Commit() error {
	if !p.Complete() {
		return ErrIncomplete
	}
	<-p.hashDone
	if p.hashErr != nil {
		return p.hashErr
	}
	if got := hex.EncodeToString(p.whole.Sum(nil)); got != p.m.Digest {
		p.Abort()
		return fmt.Errorf("%s: whole blob hashes to %s: %w", p.m.Ref(), got, ErrDigestMismatch)
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.closeOnce.Do(func() { close(p.stop) })
	<-p.saveDone
	s := p.s
	// A crash before the rename leaves a resumable partial; after it, a
	// verified blob that OpenStore indexes if the index write was lost.
	err := s.install(p.f, p.m.Digest, p.m.Size)
	p.forget()
	if err != nil {
		return err
	}
	return s.db.Delete([]byte(keyPartial + p.m.Digest))
}

func (p *Partial) forget() {
	// Wake anyone waiting on Bitmap's channel: the download is over, one way
	// or the other.
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.s.mu.Lock()
	if p.s.partials[p.m.Digest] == p {
		delete(p.s.partials, p.m.Digest)
	}
	p.s.mu.Unlock()
}

// Close stops the download, keeping what was fetched for a later
// OpenPartial to resume. Calling Close twice, or after Commit, is safe.
func (p *Partial) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	p.closeOnce.Do(func() { close(p.stop) })
	if already {
		return nil
	}
	<-p.hashDone
	<-p.saveDone
	p.forget()
	return p.f.Close()
}

// Abort stops the download and deletes what was fetched.
func (p *Partial) Abort() error {
	err := p.Close()
	os.Remove(p.s.partialPath(p.m.Digest))
	return errors.Join(err, p.s.db.Delete([]byte(keyPartial+p.m.Digest)))
}

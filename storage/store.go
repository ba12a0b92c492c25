package storage

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultChunkSize is the chunk size of published artifacts when
// StoreOptions.ChunkSize is zero: 4 MiB, large enough that per-chunk
// overhead (a request, a digest, a progress record) is noise, small enough
// that a broken transfer loses little and many holders can share the work.
const DefaultChunkSize = 4 << 20

// Store errors.
var (
	// ErrExists is returned when a manifest of the same kind, name and
	// version but a different digest is already held: versions are
	// immutable.
	ErrExists = errors.New("storage: artifact version already exists with another digest")
	// ErrBlobMissing is returned when a blob is asked for that is not held.
	ErrBlobMissing = errors.New("storage: blob not held")
	// ErrDigestMismatch is returned when bytes do not hash to the digest
	// they were given under: a corrupted chunk or blob.
	ErrDigestMismatch = errors.New("storage: digest mismatch")
	// ErrClosed is returned by a closed Store.
	ErrClosed = errors.New("storage: store closed")
)

// StoreOptions configures OpenStore.
type StoreOptions struct {
	// Dir is the root of the artifact store. Required. Blobs live in
	// Dir/blobs/sha256/<aa>/<digest>, files being written in Dir/tmp (emptied
	// at open) and resumable downloads in Dir/partial.
	Dir string
	// DB holds the index, manifests, pins and download progress, under the
	// "art/" key prefix. Required; the Store does not close it.
	DB *DB
	// Trusted lists the mesh's manifest signing keys. A manifest signed by
	// any other key, or unsigned, is refused. Empty trusts nobody: nothing
	// can be added.
	Trusted []ed25519.PublicKey
	// ChunkSize is the chunk size of artifacts published here, in bytes.
	// Zero means DefaultChunkSize.
	ChunkSize int64
	// Pinned, if set, is asked by GC about every blob it would remove; true
	// keeps the blob. It lets a caller (such as the placement reconciler)
	// pin without writing pin records. It may be called concurrently and
	// must not block.
	Pinned func(digest string) bool
	// Logger receives lifecycle logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem with the options in one error.
func (o StoreOptions) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("storage: StoreOptions.Dir is required"))
	}
	if o.DB == nil {
		errs = append(errs, errors.New("storage: StoreOptions.DB is required"))
	}
	if o.ChunkSize < 0 {
		errs = append(errs, fmt.Errorf("storage: StoreOptions.ChunkSize %d: want >= 0", o.ChunkSize))
	}
	return errors.Join(errs...)
}

// Store is a content-addressed artifact store: blobs on disk named by
// SHA-256, and signed manifests, pins and download progress in pebble. It
// is safe for concurrent use.
//
// A blob becomes visible only by an atomic rename after its digest has been
// verified and its bytes fsynced, and the directory is fsynced after the
// rename, so after a crash the store holds either the whole blob or none.
type Store struct {
	opts    StoreOptions
	db      *DB
	keyring Keyring
	log     *slog.Logger

	mu       sync.Mutex
	closed   bool
	partials map[string]*Partial // open downloads by digest

	// badMu guards bad: the DB records that did not decode, by key, each
	// with a hash of the value logged (see undecodable).
	badMu sync.Mutex
	bad   map[string]uint64
}

// undecodable logs that the DB record under key does not decode, once per
// key and value: a scan meets the same record at every call.
func (s *Store) undecodable(key, value []byte, err error) {
	h := fnv.New64a()
	h.Write(value)
	sum := h.Sum64()
	s.badMu.Lock()
	defer s.badMu.Unlock()
	if v, ok := s.bad[string(key)]; ok && v == sum {
		return
	}
	if s.bad == nil {
		s.bad = map[string]uint64{}
	}
	s.bad[string(key)] = sum
	s.log.Warn("storage: ignoring a record that does not decode", "key", string(key), "err", err)
}

// Key prefixes in the DB.
const (
	keyManifest = "art/m/" // kind/name/version -> manifest JSON
	keyBlob     = "art/b/" // digest -> blobRecord JSON
	keyPin      = "art/p/" // digest/owner -> ""
	keyPartial  = "art/x/" // digest -> chunk bitmap
)

type blobRecord struct {
	Size  int64     `json:"size"`
	Added time.Time `json:"added"`
}

// OpenStore opens (creating if needed) the store in opts.Dir. It removes
// leftovers of interrupted writes: files in the temporary directory, index
// entries of blobs whose file is gone, partial downloads without a progress
// record and progress records without a partial file.
func OpenStore(opts StoreOptions) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{
		opts:     opts,
		db:       opts.DB,
		keyring:  NewKeyring(opts.Trusted...),
		log:      opts.Logger.With("component", "artifacts"),
		partials: map[string]*Partial{},
	}
	for _, d := range []string{s.blobsDir(), s.tmpDir(), s.partialDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) blobsDir() string   { return filepath.Join(s.opts.Dir, "blobs", "sha256") }
func (s *Store) tmpDir() string     { return filepath.Join(s.opts.Dir, "tmp") }
func (s *Store) partialDir() string { return filepath.Join(s.opts.Dir, "partial") }

// BlobPath returns where the blob with the digest lives (or would live). A
// path is no promise that the blob is there or trusted: use ModelFile or
// OpenBlob to load one.
func (s *Store) BlobPath(digest string) string {
	return filepath.Join(s.blobsDir(), digest[:2], digest)
}

func (s *Store) partialPath(digest string) string {
	return filepath.Join(s.partialDir(), digest+".part")
}

func (s *Store) recover() error {
	// Temporary files are writes that never reached their rename.
	ents, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	removed := 0
	for _, e := range ents {
		if os.Remove(filepath.Join(s.tmpDir(), e.Name())) == nil {
			removed++
		}
	}
	// Index entries for blobs whose file is gone (the rename was lost in a
	// crash) go; blob files missing from the index (the crash came between
	// rename and index write) are indexed: they were verified before rename.
	indexed := map[string]bool{}
	b := s.db.NewBatch()
	err = s.db.Scan([]byte(keyBlob), func(k, _ []byte) error {
		d := string(k[len(keyBlob):])
		if _, err := os.Stat(s.BlobPath(d)); err != nil {
			b.Delete(bytesClone(k))
			removed++
		} else {
			indexed[d] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = filepath.WalkDir(s.blobsDir(), func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		d := de.Name()
		if !validDigest(d) {
			removed++
			return os.Remove(p)
		}
		if !indexed[d] {
			fi, err := de.Info()
			if err != nil {
				return err
			}
			rec, _ := json.Marshal(blobRecord{Size: fi.Size(), Added: fi.ModTime().UTC()})
			b.Put([]byte(keyBlob+d), rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: scan blobs: %w", err)
	}
	// Partial downloads pair a file with a progress record; a half pair is
	// a leftover.
	records := map[string]bool{}
	err = s.db.Scan([]byte(keyPartial), func(k, _ []byte) error {
		d := string(k[len(keyPartial):])
		if _, err := os.Stat(s.partialPath(d)); err != nil {
			b.Delete(bytesClone(k))
			removed++
		} else {
			records[d] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	ents, err = os.ReadDir(s.partialDir())
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	for _, e := range ents {
		d := strings.TrimSuffix(e.Name(), ".part")
		if !records[d] {
			_ = os.Remove(filepath.Join(s.partialDir(), e.Name()))
			removed++
		}
	}
	if err := b.Commit(true); err != nil {
		return err
	}
	if removed > 0 {
		s.log.Info("removed leftovers of interrupted writes", "count", removed)
	}
	return nil
}

func bytesClone(b []byte) []byte { return append([]byte(nil), b...) }

// Close releases the store. Open downloads are closed (their progress is
// kept for resumption). The DB is not closed. Calling Close twice is safe.
func (s *Store) Close() error {
	s.mu.Lock()
	ps := make([]*Partial, 0, len(s.partials))
	for _, p := range s.partials {
		ps = append(ps, p)
	}
	s.closed = true
	s.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Keyring returns the store's trusted signing keys.
func (s *Store) Keyring() Keyring { return s.keyring }

// ChunkSize returns the chunk size used for artifacts published here.
func (s *Store) ChunkSize() int64 { return s.opts.ChunkSize }

// PublishSpec names what Publish stores.
type PublishSpec struct {
	// Kind is model or dataset.
	Kind Kind
	// Name and Version name the artifact; versions are immutable.
	Name, Version string
	// Metadata is recorded in the manifest as given (for ONNX models: the
	// inputs and outputs).
	Metadata map[string]string
	// ChunkSize overrides the store's chunk size for this artifact; zero
	// means the store's.
	ChunkSize int64
	// Created overrides the creation time; zero means now.
	Created time.Time
}

// Publish reads an artifact from r, stores its blob, and returns its
// manifest signed with key. The key's public half must be among the
// trusted keys. Publishing the same bytes under the same name and version
// again returns the stored manifest.
func (s *Store) Publish(ctx context.Context, r io.Reader, spec PublishSpec, key ed25519.PrivateKey) (Manifest, error) {
	cs := spec.ChunkSize
	if cs == 0 {
		cs = s.opts.ChunkSize
	}
	m := Manifest{Kind: spec.Kind, Name: spec.Name, Version: spec.Version, ChunkSize: cs, Metadata: spec.Metadata, Created: spec.Created.UTC()}
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	// Check names before reading a possibly large input.
	probe := m
	probe.Digest = strings.Repeat("0", 64)
	probe.Size = 0
	if err := probe.Validate(); err != nil {
		return Manifest{}, err
	}
	if key == nil {
		return Manifest{}, fmt.Errorf("%s: %w: no signing key given", m.Ref(), ErrUnsigned)
	}
	digest, size, chunks, err := s.ingest(ctx, r, cs)
	if err != nil {
		return Manifest{}, err
	}
	m.Digest, m.Size, m.Chunks = digest, size, chunks
	Sign(&m, key)
	if err := s.addManifest(m); err != nil {
		if errors.Is(err, errSameManifest) {
			return s.Manifest(m.Kind, m.Name, m.Version)
		}
		return Manifest{}, err
	}
	s.log.Info("artifact published", "ref", m.Ref(), "digest", m.Digest, "size", m.Size)
	return m, nil
}

// ingest writes r to a temporary file while hashing it whole and by chunk,
// then makes it a blob.
func (s *Store) ingest(ctx context.Context, r io.Reader, chunkSize int64) (digest string, size int64, chunks []string, err error) {
	f, err := os.CreateTemp(s.tmpDir(), "ingest-*")
	if err != nil {
		return "", 0, nil, fmt.Errorf("storage: %w", err)
	}
	defer func() {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	whole := sha256.New()
	buf := make([]byte, chunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, nil, err
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			c := sha256.Sum256(buf[:n])
			chunks = append(chunks, hex.EncodeToString(c[:]))
			whole.Write(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				return "", 0, nil, fmt.Errorf("storage: write: %w", err)
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return "", 0, nil, fmt.Errorf("storage: read artifact: %w", rerr)
		}
	}
	digest = hex.EncodeToString(whole.Sum(nil))
	if err := s.install(f, digest, size); err != nil {
		return "", 0, nil, err
	}
	f = nil
	return digest, size, chunks, nil
}

// install makes the verified temporary file f the blob digest: fsync, close,
// rename, fsync the directory, index. f is closed either way.
func (s *Store) install(f *os.File, digest string, size int64) error {
	name := f.Name()
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(name)
		return fmt.Errorf("storage: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("storage: close: %w", err)
	}
	dst := s.BlobPath(digest)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		os.Remove(name)
		return fmt.Errorf("storage: %w", err)
	}
	if err := os.Rename(name, dst); err != nil {
		os.Remove(name)
		return fmt.Errorf("storage: rename: %w", err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	rec, _ := json.Marshal(blobRecord{Size: size, Added: time.Now().UTC()})
	return s.db.Put([]byte(keyBlob+digest), rec)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync dir: %w", err)
	}
	return nil
}

var errSameManifest = errors.New("storage: same manifest already held")

func manifestKey(kind Kind, name, version string) []byte {
	return []byte(keyManifest + string(kind) + "/" + name + "/" + version)
}

// VerifyManifest checks m's structure and signature against the trusted
// keys without storing it.
func (s *Store) VerifyManifest(m Manifest) error { return s.keyring.Verify(m) }

// AddManifest verifies m (ErrUnsigned, ErrUnknownSigner, ErrBadSignature,
// ErrInvalidManifest) and records it. The blob need not be held yet: a
// puller records the manifest, then fetches the blob. A different manifest
// for the same kind, name and version is refused with ErrExists; the same
// one again is a no-op.
func (s *Store) AddManifest(m Manifest) error {
	if err := s.addManifest(m); err != nil && !errors.Is(err, errSameManifest) {
		return err
	}
	return nil
}

// addManifest is AddManifest that returns errSameManifest when the same
// manifest is held already.
func (s *Store) addManifest(m Manifest) error {
	if err := s.keyring.Verify(m); err != nil {
		return err
	}
	k := manifestKey(m.Kind, m.Name, m.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if old, err := s.db.Get(k); err == nil {
		var om Manifest
		if err := json.Unmarshal(old, &om); err != nil {
			// The new manifest replaces it.
			s.undecodable(k, old, err)
		} else {
			if om.Digest != m.Digest {
				return fmt.Errorf("%s: %w (held %s, new %s)", m.Ref(), ErrExists, om.Digest, m.Digest)
			}
			return errSameManifest
		}
	}
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("storage: encode manifest: %w", err)
	}
	return s.db.Put(k, v)
}

// Manifest returns the manifest of kind/name@version, re-verified. An empty
// version or "latest" means the most recently created version. It returns
// ErrNotFound when none is held.
func (s *Store) Manifest(kind Kind, name, version string) (Manifest, error) {
	if version == "" || version == "latest" {
		ms, err := s.scanManifests(keyManifest + string(kind) + "/" + name + "/")
		if err != nil {
			return Manifest{}, err
		}
		if len(ms) == 0 {
			return Manifest{}, fmt.Errorf("%s/%s: %w", kind, name, ErrNotFound)
		}
		return ms[len(ms)-1], nil
	}
	v, err := s.db.Get(manifestKey(kind, name, version))
	if err != nil {
		return Manifest{}, fmt.Errorf("%s/%s@%s: %w", kind, name, version, err)
	}
	var m Manifest
	if err := json.Unmarshal(v, &m); err != nil {
		return Manifest{}, fmt.Errorf("storage: decode manifest: %w", err)
	}
	if err := s.keyring.Verify(m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Manifests returns every held manifest of the kind ("" for all kinds),
// sorted by kind, name and creation time. Manifests that no longer verify
// (the trusted keys changed) are left out.
func (s *Store) Manifests(kind Kind) ([]Manifest, error) {
	prefix := keyManifest
	if kind != "" {
		prefix += string(kind) + "/"
	}
	return s.scanManifests(prefix)
}

func (s *Store) scanManifests(prefix string) ([]Manifest, error) {
	var out []Manifest
	err := s.db.Scan([]byte(prefix), func(k, v []byte) error {
		var m Manifest
		if err := json.Unmarshal(v, &m); err != nil {
			s.undecodable(k, v, err)
			return nil
		}
		if s.keyring.Verify(m) != nil {
			return nil
		}
		out = append(out, m)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Created.Before(b.Created)
	})
	return out, err
}

// ManifestByDigest returns a verified manifest that names the digest.
func (s *Store) ManifestByDigest(digest string) (Manifest, error) {
	ms, err := s.scanManifests(keyManifest)
	if err != nil {
		return Manifest{}, err
	}
	for _, m := range ms {
		if m.Digest == digest {
			return m, nil
		}
	}
	return Manifest{}, fmt.Errorf("digest %s: %w", digest, ErrNotFound)
}

// RemoveManifest forgets kind/name@version. Its blob stays until GC finds
// it unreferenced and unpinned.
func (s *Store) RemoveManifest(kind Kind, name, version string) error {
	return s.db.Delete(manifestKey(kind, name, version))
}

// Has reports whether the whole blob with the digest is held.
func (s *Store) Has(digest string) bool {
	if !validDigest(digest) {
		return false
	}
	_, err := s.db.Get([]byte(keyBlob + digest))
	return err == nil
}

// OpenBlob opens the blob of a verified manifest for reading. It refuses
// (with the verification error) a manifest that does not verify, and
// returns ErrBlobMissing when the blob is not held.
func (s *Store) OpenBlob(m Manifest) (*os.File, error) {
	if err := s.keyring.Verify(m); err != nil {
		return nil, err
	}
	if !s.Has(m.Digest) {
		return nil, fmt.Errorf("%s: %w", m.Ref(), ErrBlobMissing)
	}
	f, err := os.Open(s.BlobPath(m.Digest))
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return f, nil
}

// ModelFile returns the path of a held model's blob after re-verifying its
// manifest, for loaders (ONNX Runtime) that want a file name. An empty
// version means the latest.
func (s *Store) ModelFile(name, version string) (string, Manifest, error) {
	m, err := s.Manifest(KindModel, name, version)
	if err != nil {
		return "", Manifest{}, err
	}
	if !s.Has(m.Digest) {
		return "", Manifest{}, fmt.Errorf("%s: %w", m.Ref(), ErrBlobMissing)
	}
	return s.BlobPath(m.Digest), m, nil
}

// VerifyBlob rehashes a held blob and compares it with its digest. It
// returns ErrDigestMismatch if the file on disk was corrupted.
func (s *Store) VerifyBlob(digest string) error {
	f, err := os.Open(s.BlobPath(digest))
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("blob %s hashes to %s: %w", digest, got, ErrDigestMismatch)
	}
	return nil
}

// Pin keeps the blob from garbage collection until every owner that pinned
// it unpins it. owner names the holder of the pin, such as a placement ID.
func (s *Store) Pin(digest, owner string) error {
	return s.db.Put([]byte(keyPin+digest+"/"+owner), nil)
}

// Unpin drops owner's pin of the blob. Unpinning what is not pinned is not
// an error.
func (s *Store) Unpin(digest, owner string) error {
	return s.db.Delete([]byte(keyPin + digest + "/" + owner))
}

// Pins returns the owners pinning the blob, sorted.
func (s *Store) Pins(digest string) ([]string, error) {
	var out []string
	p := keyPin + digest + "/"
	err := s.db.Scan([]byte(p), func(k, _ []byte) error {
		out = append(out, string(k[len(p):]))
		return nil
	})
	return out, err
}

// BlobInfo describes a held blob.
type BlobInfo struct {
	// Digest is the hex SHA-256 of the blob.
	Digest string `json:"digest"`
	// Size is its length in bytes.
	Size int64 `json:"size"`
	// Added is when it was stored here.
	Added time.Time `json:"added"`
	// Refs lists the manifests naming it ("kind/name@version").
	Refs []string `json:"refs,omitempty"`
	// Pins lists the owners pinning it.
	Pins []string `json:"pins,omitempty"`
}

// Blobs lists the held blobs, sorted by digest.
func (s *Store) Blobs() ([]BlobInfo, error) {
	refs := map[string][]string{}
	ms, err := s.scanManifests(keyManifest)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		refs[m.Digest] = append(refs[m.Digest], m.Ref())
	}
	pins := map[string][]string{}
	err = s.db.Scan([]byte(keyPin), func(k, _ []byte) error {
		rest := string(k[len(keyPin):])
		if i := strings.IndexByte(rest, '/'); i > 0 {
			pins[rest[:i]] = append(pins[rest[:i]], rest[i+1:])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []BlobInfo
	err = s.db.Scan([]byte(keyBlob), func(k, v []byte) error {
		var r blobRecord
		if err := json.Unmarshal(v, &r); err != nil {
			// Listed all the same, of unknown size and age: the
			// blob is held.
			s.undecodable(k, v, err)
		}
		d := string(k[len(keyBlob):])
		out = append(out, BlobInfo{Digest: d, Size: r.Size, Added: r.Added, Refs: refs[d], Pins: pins[d]})
		return nil
	})
	return out, err
}

// GCResult says what a garbage collection removed.
type GCResult struct {
	// Removed lists the digests of removed blobs.
	Removed []string `json:"removed"`
	// Bytes is the total size removed.
	Bytes int64 `json:"bytes"`
}

// GC removes blobs that no verified manifest names and nothing pins (no
// pin record, and StoreOptions.Pinned, if set, says false). A blob being
// served while it is removed stays readable to open handles.
func (s *Store) GC(ctx context.Context) (GCResult, error) {
	blobs, err := s.Blobs()
	if err != nil {
		return GCResult{}, err
	}
	var res GCResult
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if len(b.Refs) > 0 || len(b.Pins) > 0 || (s.opts.Pinned != nil && s.opts.Pinned(b.Digest)) {
			continue
		}
		if err := s.db.Delete([]byte(keyBlob + b.Digest)); err != nil {
			return res, err
		}
		if err := os.Remove(s.BlobPath(b.Digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("storage: gc: %w", err)
		}
		res.Removed = append(res.Removed, b.Digest)
		res.Bytes += b.Size
	}
	if len(res.Removed) > 0 {
		s.log.Info("garbage collected blobs", "count", len(res.Removed), "bytes", res.Bytes)
	}
	return res, nil
}

// ReadVerified returns the bytes of a verified manifest's blob after
// checking that they hash to its digest: a blob changed on disk since it
// was stored (bit rot, tampering) gives an error wrapping
// ErrDigestMismatch, and its bytes are not returned.
func (s *Store) ReadVerified(m Manifest) ([]byte, error) {
	f, err := s.OpenBlob(m)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != m.Digest {
		return nil, fmt.Errorf("%s: blob hashes to %s, not its digest %s: %w", m.Ref(), got, m.Digest, ErrDigestMismatch)
	}
	return b, nil
}

// Quarantine takes a corrupt blob out of the store: it is no longer held
// (Has is false, so it is pulled again), and its file moves to
// quarantine/ under the store's directory for inspection.
func (s *Store) Quarantine(digest string) error {
	if !validDigest(digest) {
		return fmt.Errorf("storage: quarantine: bad digest %q", digest)
	}
	if err := s.db.Delete([]byte(keyBlob + digest)); err != nil {
		return err
	}
	dir := filepath.Join(s.opts.Dir, "quarantine")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("storage: quarantine: %w", err)
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s-%d", digest, time.Now().UnixNano()))
	if err := os.Rename(s.BlobPath(digest), dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("storage: quarantine: %w", err)
	}
	s.log.Warn("blob quarantined: its bytes do not match its digest", "digest", digest, "moved_to", dst)
	return nil
}

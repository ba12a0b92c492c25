package storage

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testKey returns a deterministic signing key for the seed.
func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

type storeEnv struct {
	dir   string
	db    *DB
	store *Store
}

// openTestStore opens a store in dir (a fresh temp dir when empty) trusting
// the given keys, closed at cleanup.
func openTestStore(tb testing.TB, dir string, pinned func(string) bool, trusted ...ed25519.PublicKey) storeEnv {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	db, err := Open(Options{Dir: filepath.Join(dir, "db")})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := OpenStore(StoreOptions{Dir: filepath.Join(dir, "artifacts"), DB: db, Trusted: trusted, ChunkSize: 1 << 10, Pinned: pinned})
	if err != nil {
		db.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return storeEnv{dir: dir, db: db, store: s}
}

func publish(tb testing.TB, s *Store, name, version string, data []byte, key ed25519.PrivateKey) Manifest {
	tb.Helper()
	m, err := s.Publish(context.Background(), bytes.NewReader(data), PublishSpec{
		Kind: KindModel, Name: name, Version: version,
		Metadata: map[string]string{"inputs": `[{"name":"x","shape":[1,4]}]`},
	}, key)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestPublishAndOpen(t *testing.T) {
	key := testKey(1)
	env := openTestStore(t, "", nil, key.Public().(ed25519.PublicKey))
	data := randomBytes(5000, 1)
	m := publish(t, env.store, "scorer", "v1", data, key)
	if got, want := len(m.Chunks), 5; got != want {
		t.Errorf("chunks = %d, want %d", got, want)
	}
	f, err := env.store.OpenBlob(m)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, data) {
		t.Error("blob read back differs from what was published")
	}
	m2 := publish(t, env.store, "scorer", "v2", randomBytes(10, 2), key)
	latest, err := env.store.Manifest(KindModel, "scorer", "")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version != m2.Version {
		t.Errorf("latest version = %s, want %s", latest.Version, m2.Version)
	}
	path, pm, err := env.store.ModelFile("scorer", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if onDisk, _ := os.ReadFile(path); !bytes.Equal(onDisk, data) || pm.Digest != m.Digest {
		t.Error("ModelFile does not point at the published bytes")
	}
	if err := env.store.AddManifest(m); err != nil {
		t.Errorf("adding the same manifest again: %v, want no error", err)
	}
	again, err := env.store.Publish(context.Background(), bytes.NewReader(data), PublishSpec{Kind: KindModel, Name: "scorer", Version: "v1"}, key)
	if err != nil || again.Digest != m.Digest || !again.Created.Equal(m.Created) {
		t.Errorf("republishing the same bytes = %v, %v; want the stored manifest", again.Ref(), err)
	}
	if _, err := env.store.Publish(context.Background(), bytes.NewReader([]byte("other")), PublishSpec{Kind: KindModel, Name: "scorer", Version: "v1"}, key); !errors.Is(err, ErrExists) {
		t.Errorf("republishing v1 with other bytes: error = %v, want %v", err, ErrExists)
	}
	ms, err := env.store.Manifests(KindModel)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range ms {
		refs = append(refs, m.Ref())
	}
	if diff := cmp.Diff([]string{"model/scorer@v1", "model/scorer@v2"}, refs); diff != "" {
		t.Errorf("Manifests (-want +got):\n%s", diff)
	}
}

func TestManifestRefused(t *testing.T) {
	key := testKey(1)
	stranger := testKey(2)
	src := openTestStore(t, "", nil, key.Public().(ed25519.PublicKey), stranger.Public().(ed25519.PublicKey))
	good := publish(t, src.store, "scorer", "v1", randomBytes(3000, 3), key)
	fromStranger := publish(t, src.store, "other", "v1", randomBytes(3000, 4), stranger)

	tests := []struct {
		name   string
		mutate func(m Manifest) Manifest
		want   error
	}{
		{"good", func(m Manifest) Manifest { return m }, nil},
		{"unsigned", func(m Manifest) Manifest { m.Signature = nil; m.Signer = ""; return m }, ErrUnsigned},
		{"tampered version", func(m Manifest) Manifest { m.Version = "v9"; return m }, ErrBadSignature},
		{"tampered digest", func(m Manifest) Manifest {
			m.Digest = fromStranger.Digest
			return m
		}, ErrBadSignature},
		{"tampered metadata", func(m Manifest) Manifest { m.Metadata = map[string]string{"inputs": "[]"}; return m }, ErrBadSignature},
		{"tampered chunk", func(m Manifest) Manifest { m.Chunks[0] = m.Chunks[1]; return m }, ErrBadSignature},
		{"unknown signer", func(Manifest) Manifest { return fromStranger }, ErrUnknownSigner},
		{"signer id of trusted key, other key's signature", func(m Manifest) Manifest {
			m.Signature = fromStranger.Signature
			return m
		}, ErrBadSignature},
		{"invalid", func(m Manifest) Manifest { m.Chunks = m.Chunks[:1]; return m }, ErrInvalidManifest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The receiving store trusts only key.
			dst := openTestStore(t, "", nil, key.Public().(ed25519.PublicKey))
			m := tt.mutate(good.Clone())
			err := dst.store.AddManifest(m)
			if !errors.Is(err, tt.want) {
				t.Fatalf("AddManifest error = %v, want %v", err, tt.want)
			}
			if _, err := dst.store.OpenPartial(m); !errors.Is(err, tt.want) {
				t.Errorf("OpenPartial error = %v, want %v", err, tt.want)
			}
			if tt.want == nil {
				return
			}
			if _, err := dst.store.OpenBlob(m); !errors.Is(err, tt.want) {
				t.Errorf("OpenBlob error = %v, want %v", err, tt.want)
			}
			if ms, _ := dst.store.Manifests(""); len(ms) != 0 {
				t.Errorf("refused manifest is listed: %v", ms)
			}
		})
	}
}

func TestPartialResume(t *testing.T) {
	key := testKey(1)
	trusted := key.Public().(ed25519.PublicKey)
	src := openTestStore(t, "", nil, trusted)
	data := randomBytes(10*1024+100, 5)
	m := publish(t, src.store, "scorer", "v1", data, key)
	chunk := func(i int) []byte {
		return data[int64(i)*m.ChunkSize : int64(i)*m.ChunkSize+m.ChunkLen(i)]
	}

	dir := t.TempDir()
	dst := openTestStore(t, dir, nil, trusted)
	p, err := dst.store.OpenPartial(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.store.OpenPartial(m); !errors.Is(err, ErrPartialBusy) {
		t.Errorf("second OpenPartial error = %v, want %v", err, ErrPartialBusy)
	}
	for _, i := range []int{7, 0, 3, 10} {
		if err := p.WriteChunk(i, chunk(i)); err != nil {
			t.Fatal(err)
		}
	}
	bad := append([]byte(nil), chunk(5)...)
	bad[0] ^= 1
	if err := p.WriteChunk(5, bad); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("WriteChunk(corrupted) error = %v, want %v", err, ErrDigestMismatch)
	}
	if err := p.Commit(); !errors.Is(err, ErrIncomplete) {
		t.Errorf("Commit of incomplete download error = %v, want %v", err, ErrIncomplete)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	dst.store.Close()
	dst.db.Close()

	// Corrupt chunk 3 on disk behind the store's back: the resume must
	// notice and fetch it again.
	pf := filepath.Join(dir, "artifacts", "partial", m.Digest+".part")
	f, err := os.OpenFile(pf, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xfe}, 3*m.ChunkSize+10)
	f.Close()

	dst = openTestStore(t, dir, nil, trusted)
	if dst.store.Has(m.Digest) {
		t.Fatal("incomplete download visible as a blob")
	}
	p, err = dst.store.OpenPartial(m)
	if err != nil {
		t.Fatal(err)
	}
	missing := p.Missing()
	want := []int{1, 2, 3, 4, 5, 6, 8, 9}
	if diff := cmp.Diff(want, missing); diff != "" {
		t.Errorf("missing after resume (-want +got):\n%s", diff)
	}
	_, resumed, _ := p.Progress()
	if got, want := resumed, m.ChunkLen(0)+m.ChunkLen(7)+m.ChunkLen(10); got != want {
		t.Errorf("resumed bytes = %d, want %d", got, want)
	}
	for _, i := range missing {
		if err := p.WriteChunk(i, chunk(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if !dst.store.Has(m.Digest) {
		t.Fatal("committed blob not held")
	}
	if err := dst.store.VerifyBlob(m.Digest); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(pf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left after commit: %v", err)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	key := testKey(1)
	trusted := key.Public().(ed25519.PublicKey)
	dir := t.TempDir()
	env := openTestStore(t, dir, nil, trusted)
	m := publish(t, env.store, "scorer", "v1", randomBytes(2000, 6), key)
	gone := publish(t, env.store, "scorer", "v2", randomBytes(2000, 7), key)
	env.store.Close()
	env.db.Close()

	art := filepath.Join(dir, "artifacts")
	leftovers := []string{
		filepath.Join(art, "tmp", "ingest-123"),
		filepath.Join(art, "partial", "abc.part"),
	}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A blob whose rename was lost in a crash.
	os.Remove(filepath.Join(art, "blobs", "sha256", gone.Digest[:2], gone.Digest))

	env = openTestStore(t, dir, nil, trusted)
	for _, p := range leftovers {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s still there", filepath.Base(p))
		}
	}
	if !env.store.Has(m.Digest) {
		t.Error("intact blob lost")
	}
	if env.store.Has(gone.Digest) {
		t.Error("index still claims a blob whose file is gone")
	}
}

func TestGC(t *testing.T) {
	key := testKey(1)
	keep := map[string]bool{}
	env := openTestStore(t, "", func(d string) bool { return keep[d] }, key.Public().(ed25519.PublicKey))
	s := env.store
	referenced := publish(t, s, "a", "v1", randomBytes(100, 1), key)
	pinned := publish(t, s, "b", "v1", randomBytes(100, 2), key)
	called := publish(t, s, "c", "v1", randomBytes(100, 3), key)
	garbage := publish(t, s, "d", "v1", randomBytes(100, 4), key)
	for _, m := range []Manifest{pinned, called, garbage} {
		if err := s.RemoveManifest(m.Kind, m.Name, m.Version); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Pin(pinned.Digest, "placement/p1"); err != nil {
		t.Fatal(err)
	}
	keep[called.Digest] = true
	res, err := s.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(GCResult{Removed: []string{garbage.Digest}, Bytes: 100}, res); diff != "" {
		t.Errorf("GC (-want +got):\n%s", diff)
	}
	for _, m := range []Manifest{referenced, pinned, called} {
		if !s.Has(m.Digest) {
			t.Errorf("GC removed %s", m.Ref())
		}
	}
	if _, err := os.Stat(s.BlobPath(garbage.Digest)); !errors.Is(err, os.ErrNotExist) {
		t.Error("garbage blob file still on disk")
	}
	s.Unpin(pinned.Digest, "placement/p1")
	res, _ = s.GC(context.Background())
	if diff := cmp.Diff([]string{pinned.Digest}, res.Removed); diff != "" {
		t.Errorf("GC after Unpin (-want +got):\n%s", diff)
	}
}

// TestUndecodableRecordsAreLogged: a manifest or blob record that does not
// decode is left out of the manifests (listed, of unknown size, among the
// blobs; replaced by AddManifest) as before, and logged once per key and
// value however often it is read.
func TestUndecodableRecordsAreLogged(t *testing.T) {
	key := testKey(1)
	env := openTestStore(t, "", nil, key.Public().(ed25519.PublicKey))
	var buf bytes.Buffer
	env.store.log = slog.New(slog.NewTextHandler(&buf, nil))
	m := publish(t, env.store, "scorer", "v1", randomBytes(100, 1), key)
	mk, bk := manifestKey(m.Kind, m.Name, m.Version), []byte(keyBlob+m.Digest)
	for _, k := range [][]byte{mk, bk} {
		if err := env.db.Put(k, []byte(`{"digest":`)); err != nil {
			t.Fatal(err)
		}
	}
	logged := func(k []byte) int { return strings.Count(buf.String(), "key="+string(k)+" ") }
	for range 3 {
		if ms, err := env.store.Manifests(""); err != nil || len(ms) != 0 {
			t.Fatalf("Manifests = %v, %v; want none", ms, err)
		}
		bs, err := env.store.Blobs()
		if err != nil || len(bs) != 1 || bs[0].Digest != m.Digest || bs[0].Size != 0 {
			t.Fatalf("Blobs = %+v, %v; want the blob, of unknown size", bs, err)
		}
	}
	if n, b := logged(mk), logged(bk); n != 1 || b != 1 {
		t.Errorf("logged the manifest %d times and the blob record %d times, want once each:\n%s", n, b, buf.String())
	}
	if err := env.store.AddManifest(m); err != nil {
		t.Fatalf("AddManifest over an undecodable one: %v", err)
	}
	if ms, err := env.store.Manifests(""); err != nil || len(ms) != 1 {
		t.Errorf("Manifests after AddManifest = %v, %v; want the manifest", ms, err)
	}
	// Another bad value under the same key is logged again.
	if err := env.db.Put(mk, []byte(`[]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.Manifests(""); err != nil {
		t.Fatal(err)
	}
	if n := logged(mk); n != 2 {
		t.Errorf("logged the manifest %d times after another bad value, want 2", n)
	}
}

func TestCanonicalIgnoresMapOrder(t *testing.T) {
	m := Manifest{Kind: KindModel, Name: "n", Version: "v", Created: time.Unix(1, 2),
		Metadata: map[string]string{"a": "1", "b": "2", "c": "3"}}
	m2 := m.Clone()
	m2.Metadata = map[string]string{"c": "3", "b": "2", "a": "1"}
	if !bytes.Equal(m.Canonical(), m2.Canonical()) {
		t.Error("canonical encoding depends on map order")
	}
	m2.Metadata["a"] = "1x"
	if bytes.Equal(m.Canonical(), m2.Canonical()) {
		t.Error("canonical encoding ignores a metadata change")
	}
}

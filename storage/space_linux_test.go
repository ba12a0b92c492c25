package storage

import (
	"crypto/ed25519"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPartialNeedsSpace opens a download bigger than its disk: it fails at
// once with ENOSPC, instead of after writing most of the blob.
func TestPartialNeedsSpace(t *testing.T) {
	key := testKey(1)
	trusted := key.Public().(ed25519.PublicKey)
	src := openTestStore(t, "", nil, trusted)
	m := publish(t, src.store, "big", "v1", randomBytes(4<<20, 9), key)

	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 1 MiB tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	db, err := Open(Options{Dir: filepath.Join(t.TempDir(), "db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := OpenStore(StoreOptions{Dir: filepath.Join(mnt, "artifacts"), DB: db, Trusted: []ed25519.PublicKey{trusted}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.OpenPartial(m); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("OpenPartial of %d bytes on a 1 MiB disk: %v, want ENOSPC", m.Size, err)
	}
}

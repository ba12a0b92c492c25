package storage

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

func TestPutGetScanDelete(t *testing.T) {
	db, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	for _, kv := range [][2]string{{"a/1", "x"}, {"a/2", "y"}, {"b/1", "z"}} {
		if err := db.Put([]byte(kv[0]), []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	if err := db.Scan([]byte("a/"), func(k, v []byte) error {
		got[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"a/1": "x", "a/2": "y"}, got); diff != "" {
		t.Errorf("scan a/ (-want +got):\n%s", diff)
	}
	if err := db.Delete([]byte("a/1")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("a/1")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	v, err := db.Get([]byte("b/1"))
	if err != nil || string(v) != "z" {
		t.Errorf("Get b/1 = %q, %v; want z", v, err)
	}
}

func TestReopenKeepsWrites(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Put([]byte("k1"), []byte("v1"))
	b.Put([]byte("k2"), []byte("v2"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for k, want := range map[string]string{"k1": "v1", "k2": "v2"} {
		v, err := db.Get([]byte(k))
		if err != nil || string(v) != want {
			t.Errorf("Get %s = %q, %v; want %q", k, v, err, want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("a/"), []byte("a0")},
		{[]byte{0x01, 0xff}, []byte{0x02}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := prefixEnd(tc.in); !cmp.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	db, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := db.Put([]byte("k"), []byte("v")); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}
	if _, err := db.Get([]byte("k")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	b := db.NewBatch()
	b.Put([]byte("k"), []byte("v"))
	if err := b.Commit(true); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
}

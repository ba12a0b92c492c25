package trainer_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-mesh/strata/trainer"
)

func TestCodeRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	for name, body := range map[string]string{"train.py": "print(1)\n", "lib/util.py": "x = 1\n", ".git/HEAD": "ref\n", "lib/__pycache__/u.pyc": "junk"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "train.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "lib", "passwd")); err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := trainer.PackCode(&a, src); err != nil {
		t.Fatal(err)
	}
	// The same tree packs to the same bytes, whatever the files' times.
	future := filepath.Join(src, "lib", "util.py")
	if err := os.Chtimes(future, a2000, a2000); err != nil {
		t.Fatal(err)
	}
	if err := trainer.PackCode(&b, src); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("packing the same tree twice gave different archives")
	}
	dst := t.TempDir()
	if err := trainer.UnpackCode(bytes.NewReader(a.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	_ = filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			body, _ := os.ReadFile(p)
			got[filepath.ToSlash(rel)] = string(body)
		}
		return err
	})
	want := map[string]string{"train.py": "print(1)\n", "lib/util.py": "x = 1\n"}
	if len(got) != len(want) || got["train.py"] != want["train.py"] || got["lib/util.py"] != want["lib/util.py"] {
		t.Errorf("unpacked %v, want %v (no hidden files, caches or links)", got, want)
	}
	if fi, err := os.Stat(filepath.Join(dst, "train.py")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("train.py lost its executable bit: %v %v", fi, err)
	}
}

var a2000 = mustTime("2000-01-01T00:00:00Z")

// TestUnpackCodeRefuses: entries that would leave the directory, links and
// devices are refused, and nothing is written outside it.
func TestUnpackCodeRefuses(t *testing.T) {
	t.Parallel()
	for name, hdr := range map[string]tar.Header{
		"dotdot":   {Name: "../escape.py", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		"absolute": {Name: "/tmp/escape.py", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		"symlink":  {Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		"hardlink": {Name: "link", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"},
		"device":   {Name: "dev", Typeflag: tar.TypeChar},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte("x"))
		}
		tw.Close()
		dir := filepath.Join(t.TempDir(), "code")
		if err := trainer.UnpackCode(bytes.NewReader(buf.Bytes()), dir); !errors.Is(err, trainer.ErrCode) {
			t.Errorf("%s: err %v, want ErrCode", name, err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.py")); err == nil {
			t.Errorf("%s: a file was written outside the directory", name)
		}
	}
	if err := trainer.UnpackCode(bytes.NewReader([]byte("not a tar archive at all")), ""); !errors.Is(err, trainer.ErrCode) {
		t.Errorf("garbage: err %v, want ErrCode", err)
	}
}

func mustTime(s string) time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return tm
}

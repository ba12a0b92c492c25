package infer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFindLibrary: with no path configured, the library a source checkout's
// `make setup-ort` installs is found from the working directory.
func TestFindLibrary(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if got := FindLibrary(); got != "" && !slices.Contains([]string{"/usr/lib/strata/libonnxruntime.so.1", "/usr/local/lib/libonnxruntime.so.1", "/usr/lib/libonnxruntime.so.1"}, got) {
		t.Fatalf("FindLibrary in an empty directory = %q", got)
	}
	lib := filepath.Join(dir, ".deps", "onnxruntime", "libonnxruntime.so.1")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := FindLibrary(); got != lib {
		t.Errorf("FindLibrary = %q, want %q", got, lib)
	}
}

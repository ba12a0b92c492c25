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

// TestConfiguredLibrary: a configured path wins over $STRATA_ORT_LIB, which
// is the default; with neither, nothing is configured.
func TestConfiguredLibrary(t *testing.T) {
	t.Setenv(EnvLibraryPath, "/from/env.so")
	if got := ConfiguredLibrary("/configured.so"); got != "/configured.so" {
		t.Errorf("ConfiguredLibrary with a path = %q, want the path", got)
	}
	if got := ConfiguredLibrary(""); got != "/from/env.so" {
		t.Errorf("ConfiguredLibrary without a path = %q, want $%s", got, EnvLibraryPath)
	}
	var c Config
	c.EnsureDefaults()
	if c.LibraryPath != "/from/env.so" {
		t.Errorf("Config.LibraryPath default = %q, want $%s", c.LibraryPath, EnvLibraryPath)
	}
	t.Setenv(EnvLibraryPath, "")
	if got := ConfiguredLibrary(""); got != "" {
		t.Errorf("ConfiguredLibrary with neither = %q, want none", got)
	}
}

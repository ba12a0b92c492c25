package infer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// EnvLibraryPath names the environment variable that holds the path of the
// ONNX Runtime shared library when Config.LibraryPath is empty.
const EnvLibraryPath = "STRATA_ORT_LIB"

// ConfiguredLibrary is the ONNX Runtime shared library a configuration
// names: path when it is set, else $STRATA_ORT_LIB; "" when neither is
// (InitRuntime then tries LibraryCandidates). Every reader of the
// environment variable goes through it.
func ConfiguredLibrary(path string) string {
	if path != "" {
		return path
	}
	return os.Getenv(EnvLibraryPath)
}

// ErrRuntimeUnavailable is returned (wrapped, with the path tried and how to
// fix it) when the ONNX Runtime shared library cannot be found or loaded.
var ErrRuntimeUnavailable = errors.New("infer: ONNX Runtime unavailable")

// The ONNX Runtime environment is process-global: ORT allows one per process,
// and many agents may run in one process (tests, the dev mesh). The first
// successful initialisation wins; later callers must name the same library.
var ortEnv struct {
	mu   sync.Mutex
	path string
	err  error
	done bool
}

// InitRuntime initialises the process-global ONNX Runtime environment from the
// shared library at path, or from $STRATA_ORT_LIB when path is empty. It is
// safe to call from many goroutines and many servers: the environment is set
// up once, and later calls return the first call's result. A failure to find
// the library is not remembered, so a later call with a valid path succeeds.
func InitRuntime(path string) error {
	path = ConfiguredLibrary(path)
	if path == "" {
		path = FindLibrary()
	}
	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	if ortEnv.done {
		if ortEnv.err == nil && path != "" && !sameFile(path, ortEnv.path) {
			return fmt.Errorf("%w: already initialised from %s, cannot switch to %s in the same process", ErrRuntimeUnavailable, ortEnv.path, path)
		}
		return ortEnv.err
	}
	if ort.IsInitialized() {
		// Another package in this process set the environment up itself.
		ortEnv.done, ortEnv.path = true, path
		return nil
	}
	if path == "" {
		return missingRuntime("", fmt.Errorf("none configured, and none found at %s", strings.Join(LibraryCandidates(), ", ")))
	}
	if _, err := os.Stat(path); err != nil {
		return missingRuntime(path, err)
	}
	ort.SetSharedLibraryPath(path)
	ortEnv.done = true
	ortEnv.path = path
	// Errors come back to callers as Go errors; ORT's own log would repeat
	// them on stderr.
	if err := ort.InitializeEnvironment(ort.WithLogLevelFatal()); err != nil {
		ortEnv.err = fmt.Errorf("%w: initialise from %s: %v", ErrRuntimeUnavailable, path, err)
	}
	return ortEnv.err
}

// RuntimeVersion returns the ONNX Runtime version string, or "" before
// InitRuntime has succeeded.
func RuntimeVersion() string {
	ortEnv.mu.Lock()
	ok := ortEnv.done && ortEnv.err == nil
	ortEnv.mu.Unlock()
	if !ok {
		return ""
	}
	return ort.GetVersion()
}

// missingRuntime says what is missing and how to install it.
// LibraryCandidates lists where FindLibrary looks for the ONNX Runtime
// library, in order: beside the strata binary, where the release tarball
// and .deb put it (../lib/strata from the binary, /usr/lib/strata), where
// `make setup-ort` puts it in a source checkout (../.deps from bin/strata,
// or .deps in the working directory), and the system's library folders.
func LibraryCandidates() []string {
	const name = "libonnxruntime.so.1"
	var out []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := filepath.Dir(exe)
		out = append(out, filepath.Join(dir, name), filepath.Join(dir, "..", "lib", "strata", name), filepath.Join(dir, "..", ".deps", "onnxruntime", name))
	}
	return append(out, filepath.Join(".deps", "onnxruntime", name), "/usr/lib/strata/"+name, "/usr/local/lib/"+name, "/usr/lib/"+name)
}

// FindLibrary returns the first of LibraryCandidates that exists, as an
// absolute path, or "".
func FindLibrary() string {
	for _, p := range LibraryCandidates() {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			if abs, err := filepath.Abs(p); err == nil {
				return abs
			}
			return p
		}
	}
	return ""
}

func missingRuntime(path string, err error) error {
	where := "ONNX Runtime library"
	if path != "" {
		where = path
	}
	return fmt.Errorf("%w: %s: %v; run `make setup-ort` (installs the CPU build at .deps/onnxruntime/libonnxruntime.so.1, which the Makefile exports as %s), or set %s to your own ONNX Runtime 1.24 shared library (a CUDA build on GPU nodes, for example)", ErrRuntimeUnavailable, where, err, EnvLibraryPath, EnvLibraryPath)
}

// sameFile reports whether a and b name the same file, so that one library
// reached by two spellings (relative, absolute, through a link) is accepted.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/docrun"
)

// docsAPIAddr is the dev mesh's API address as the docs write it; the
// test replaces it with its own mesh's.
const docsAPIAddr = "127.0.0.1:7470"

// TestExampleReadmes runs the runnable blocks of README.md, every README
// under examples/ and docs/*.md (but install.md) against one dev mesh, as
// a reader would after `make demo` (without the demo's story: --no-model),
// file by file in order. It fails with the command, its position and its output when one
// exits non-zero or its output lacks an expected line. Every policy file
// under examples/ must be named by some runnable command.
func TestExampleReadmes(t *testing.T) {
	t.Parallel()
	if lib := os.Getenv("STRATA_ORT_LIB"); lib == "" {
		t.Skip("STRATA_ORT_LIB is not set (make setup-ort): the examples serve models")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "examples/README.md"}
	more, _ := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, d := range docs {
		// docs/install.md's guide runs on hosts of its own (TestInstallGuide).
		if filepath.Base(d) != "install.md" {
			more = append(more, d)
		}
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	var cmds []docrun.Command
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		c, err := docrun.Parse(f, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range c {
			if cmd.Host != "" {
				t.Fatalf("%s: host= blocks belong to docs/install.md's guide (TestInstallGuide); here every command runs against one dev mesh", cmd.Where())
			}
		}
		cmds = append(cmds, c...)
	}
	policies, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	nested, _ := filepath.Glob(filepath.Join(root, "examples", "*", "*.yaml"))
	for _, p := range append(policies, nested...) {
		rel, _ := filepath.Rel(root, p)
		named := false
		for _, c := range cmds {
			named = named || strings.Contains(c.Cmd, rel)
		}
		if !named {
			t.Errorf("no runnable command names %s: give it a README section with a runnable block", rel)
		}
	}

	// The readers' working directory: bin/strata is the binary under test
	// and examples/ the repository's; files the commands write land here.
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/strata": strataBin, "examples": filepath.Join(root, "examples")} {
		if err := os.Symlink(target, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	api := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startDevMesh(t, api)
	env := append(os.Environ(), "STRATA_ADDR=http://"+api)
	// python3 is the Python torchrun runs, where a block needs torchrun:
	// the one with PyTorch and NumPy (on Debian, /usr/bin/python3).
	if _, err := exec.LookPath("torchrun"); err == nil {
		shim := filepath.Join(work, ".python")
		os.Mkdir(shim, 0o755)
		if err := os.Symlink(torchrunPython(t), filepath.Join(shim, "python3")); err != nil {
			t.Fatal(err)
		}
		env = append(env, "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
	}

	start := time.Now()
	ran, skipped := 0, map[string]bool{}
	for _, c := range cmds {
		if missing := docrun.Missing(c.Needs); missing != "" {
			skipped[fmt.Sprintf("%s (no %s in PATH)", c.File, missing)] = true
			continue
		}
		ran++
		out, err := docrun.Run(c, strings.ReplaceAll(c.Cmd, docsAPIAddr, api), func(script string) *exec.Cmd {
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir, cmd.Env = work, env
			return cmd
		})
		if err != nil {
			t.Fatalf("%s: %s\n%v\noutput:\n%s", c.Where(), c.Cmd, err, out)
		}
	}
	t.Logf("ran %d commands from %d files in %s", ran, len(files), time.Since(start).Round(100*time.Millisecond))
	for s := range skipped {
		t.Logf("skipped the runnable blocks of %s", s)
	}
}

// startDevMesh runs `strata dev` (without the demo's story) with its
// first agent's API on api, and returns once it has published what the
// examples use; the mesh stops at the end of the test.
func startDevMesh(t *testing.T, api string) {
	t.Helper()
	cmd := exec.Command(strataBin, "dev", "--no-model", "--api", api, "--dir", t.TempDir(), "--log-level", "error")
	cmd.Env = os.Environ()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log bytes.Buffer
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(pr)
		once := sync.OnceFunc(func() { close(ready) })
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "API of ") {
				once()
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		pw.Close()
		if t.Failed() {
			mu.Lock()
			t.Logf("strata dev:\n%s", log.String())
			mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-exited:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("strata dev exited:\n%s", log.String())
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("strata dev did not start within 60s:\n%s", log.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "For examples/: published") {
		t.Fatalf("strata dev published nothing for examples/:\n%s", log.String())
	}
}

// TestReadmeListsEveryDoc: README.md's docs list links every page under
// docs/, so a new page cannot be missed by a reader who starts there.
func TestReadmeListsEveryDoc(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	for _, d := range docs {
		link := "(docs/" + filepath.Base(d) + ")"
		if !strings.Contains(string(readme), link) {
			t.Errorf("README.md's docs list does not link docs/%s", filepath.Base(d))
		}
	}
}

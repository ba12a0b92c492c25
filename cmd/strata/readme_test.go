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
)

// The docs' runnable blocks: a fenced block whose info string is
// "sh runnable" holds commands to run, in order, against `strata dev`'s
// mesh, from the repository's root (CONTRIBUTING.md). A line
// "# expect: TEXT" after a command says its output (stdout and stderr)
// holds TEXT; "# eventually: TEXT" runs it again until it exits 0 with
// TEXT in its output, as a reader would. Fence options after "runnable": needs=CMD (the block is
// skipped where CMD is not in PATH).
const (
	runnableFence   = "```sh runnable"
	expectPrefix    = "# expect: "
	eventuallyPfx   = "# eventually: "
	needsOption     = "needs="
	docsAPIAddr     = "127.0.0.1:7470" // the dev mesh's API in the docs
	eventuallyLimit = 60 * time.Second
)

// docCommand is one command of a runnable block.
type docCommand struct {
	file       string
	line       int
	cmd        string
	expect     []string
	eventually string
	needs      []string
}

func (c docCommand) where() string { return fmt.Sprintf("%s:%d", c.file, c.line) }

// parseRunnable returns the commands of src's runnable blocks; file names
// them in errors and in the commands' positions.
func parseRunnable(file string, src []byte) ([]docCommand, error) {
	var out []docCommand
	sc := bufio.NewScanner(bytes.NewReader(src))
	n := 0
	in := false
	first := 0 // the index in out of the open block's first command
	var needs []string
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !in {
			if trimmed == runnableFence || strings.HasPrefix(trimmed, runnableFence+" ") {
				in, needs, first = true, nil, len(out)
				for _, opt := range strings.Fields(strings.TrimPrefix(trimmed, runnableFence)) {
					v, ok := strings.CutPrefix(opt, needsOption)
					if !ok {
						return nil, fmt.Errorf("%s:%d: unknown fence option %q (want %s…)", file, n, opt, needsOption)
					}
					needs = append(needs, v)
				}
			}
			continue
		}
		switch {
		case trimmed == "```":
			in = false
		case trimmed == "":
		case strings.HasPrefix(trimmed, expectPrefix), strings.HasPrefix(trimmed, eventuallyPfx):
			if len(out) == first {
				return nil, fmt.Errorf("%s:%d: %q follows no command", file, n, trimmed)
			}
			c := &out[len(out)-1]
			if text, ok := strings.CutPrefix(trimmed, eventuallyPfx); ok {
				if c.eventually != "" || len(c.expect) > 0 {
					return nil, fmt.Errorf("%s:%d: # eventually: must come first, once, after its command", file, n)
				}
				c.eventually = text
			} else {
				c.expect = append(c.expect, strings.TrimPrefix(trimmed, expectPrefix))
			}
		case strings.HasPrefix(trimmed, "#"):
			// A comment of the reader's.
		default:
			c := docCommand{file: file, line: n, cmd: line, needs: needs}
			for strings.HasSuffix(strings.TrimSpace(c.cmd), `\`) && sc.Scan() {
				n++
				c.cmd += "\n" + sc.Text()
			}
			out = append(out, c)
		}
	}
	if in {
		return nil, fmt.Errorf("%s: a runnable block is not closed", file)
	}
	return out, sc.Err()
}

func TestParseRunnable(t *testing.T) {
	src := "x\n```sh\nnot run\n```\n```sh runnable needs=torchrun\n# a note\nbin/strata a  # why\n# expect: A\n# expect: B\n\ncurl x \\\n  -d y\n# eventually: done\n```\n"
	got, err := parseRunnable("R.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].line != 7 || got[0].cmd != "bin/strata a  # why" || strings.Join(got[0].expect, "|") != "A|B" ||
		got[1].line != 11 || got[1].cmd != "curl x \\\n  -d y" || got[1].eventually != "done" || got[1].needs[0] != "torchrun" {
		t.Errorf("parsed %+v", got)
	}
	for _, bad := range []string{"```sh runnable\n# expect: x\n```\n", "```sh runnable\na\n", "```sh runnable fast\na\n```\n"} {
		if _, err := parseRunnable("R.md", []byte(bad)); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
}

// TestExampleReadmes runs the runnable blocks of README.md and every
// README under examples/ against one dev mesh, as a reader would after
// `make demo` (without the demo's story: --no-model), file by file in
// order. It fails with the command, its position and its output when one
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
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	var cmds []docCommand
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseRunnable(f, src)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c...)
	}
	policies, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	nested, _ := filepath.Glob(filepath.Join(root, "examples", "*", "*.yaml"))
	for _, p := range append(policies, nested...) {
		rel, _ := filepath.Rel(root, p)
		named := false
		for _, c := range cmds {
			named = named || strings.Contains(c.cmd, rel)
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
		if missing := missingCommand(c.needs); missing != "" {
			skipped[fmt.Sprintf("%s (no %s in PATH)", c.file, missing)] = true
			continue
		}
		ran++
		out, err := runDocCommand(c, work, env, api)
		if err != nil {
			t.Fatalf("%s: %s\n%v\noutput:\n%s", c.where(), c.cmd, err, out)
		}
	}
	t.Logf("ran %d commands from %d files in %s", ran, len(files), time.Since(start).Round(100*time.Millisecond))
	for s := range skipped {
		t.Logf("skipped the runnable blocks of %s", s)
	}
}

func missingCommand(needs []string) string {
	for _, n := range needs {
		if _, err := exec.LookPath(n); err != nil {
			return n
		}
	}
	return ""
}

// runDocCommand runs one command with bash in dir, the docs' API address
// replaced by api, and checks its exit status and expected lines. With
// "# eventually:" it runs it again, once a second (the reader's pace;
// coordinates settle and a sweep's trials run in seconds), until it
// exits 0 with the text in its output or eventuallyLimit passes.
func runDocCommand(c docCommand, dir string, env []string, api string) (string, error) {
	script := strings.ReplaceAll(c.cmd, docsAPIAddr, api)
	deadline := time.Now().Add(eventuallyLimit)
	for {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		b, err := cmd.CombinedOutput()
		out := string(b)
		if c.eventually != "" && (err != nil || !strings.Contains(out, c.eventually)) {
			if time.Now().After(deadline) {
				return out, fmt.Errorf("output lacks %q after %s of tries (last: %v)", c.eventually, eventuallyLimit, err)
			}
			// The cadence of a "# eventually:" retry, as a user running the
			// command again would; bounded by the deadline above.
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			return out, err
		}
		for _, want := range c.expect {
			if !strings.Contains(out, want) {
				return out, fmt.Errorf("output lacks %q", want)
			}
		}
		return out, nil
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

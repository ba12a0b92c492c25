package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/clidoc"
)

// TestHelpGolden keeps `strata -h` in a golden file: the command list is
// what completion, the man page and people read.
func TestHelpGolden(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := run([]string{"-h"}, &out, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	checkGolden(t, "help", out.String())
}

// TestCompletion: `strata completion SHELL` prints the script the release
// build packages (gendocs over the built binary), for every shell; bash
// reads it without a syntax error.
func TestCompletion(t *testing.T) {
	t.Parallel()
	built, err := clidoc.ReadCommands(func(args ...string) (string, error) {
		out, err := exec.Command(strataBin, args...).CombinedOutput()
		return string(out), err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, shell := range clidoc.Shells {
		var out, errb bytes.Buffer
		if code := run([]string{"completion", shell}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", shell, code, errb.String())
		}
		want, err := clidoc.Completion(shell, built)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("%s: strata completion differs from the packaged script", shell)
		}
		for _, cmd := range []string{"get", "describe", "completion", "delete"} {
			if !strings.Contains(out.String(), cmd) {
				t.Errorf("%s: no %s in the script", shell, cmd)
			}
		}
		if shell == "bash" {
			if bash, err := exec.LookPath("bash"); err == nil {
				f := t.TempDir() + "/strata.bash"
				os.WriteFile(f, out.Bytes(), 0o600)
				if b, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
					t.Errorf("bash -n: %v\n%s", err, b)
				}
			}
		}
	}
	var errb bytes.Buffer
	if code := run([]string{"completion", "powershell"}, &bytes.Buffer{}, &errb); code != 1 || !strings.Contains(errb.String(), "use bash, zsh, fish") {
		t.Errorf("powershell: exit %d, %q", code, errb.String())
	}
}

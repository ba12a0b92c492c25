package docrun

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	src := "x\n```sh\nnot run\n```\n```sh runnable needs=torchrun\n# a note\nbin/strata a  # why\n# expect: A\n# expect: B\n\ncurl x \\\n  -d y\n# eventually: done\n```\n"
	got, err := Parse("R.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Line != 7 || got[0].Cmd != "bin/strata a  # why" || strings.Join(got[0].Expect, "|") != "A|B" ||
		got[1].Line != 11 || got[1].Cmd != "curl x \\\n  -d y" || got[1].Eventually != "done" || got[1].Needs[0] != "torchrun" {
		t.Errorf("parsed %+v", got)
	}
	for _, bad := range []string{
		"```sh runnable\n# expect: x\n```\n",
		"```sh runnable\na\n",
		"```sh runnable fast\na\n```\n",
		"```sh runnable host=\na\n```\n",
		"```sh runnable\ncat > f <<'EOF'\nx\n```\n",
		"```sh runnable host=b\n# files from a:\na\n```\n",
		"```sh runnable host=b\n# files from a: x\n```\n",
	} {
		if _, err := Parse("R.md", []byte(bad)); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
}

func TestParseHostsFilesAndHereDocuments(t *testing.T) {
	t.Parallel()
	src := "```sh runnable host=b\n# files from a: gossip.key pki/ca.crt\n./install.sh\n# expect: ok\ncat > job.yaml <<'EOF'\nkind: X\n# not a directive\nEOF\nstrata apply -f job.yaml\n```\n"
	got, err := Parse("G.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("parsed %d commands: %+v", len(got), got)
	}
	if got[0].Host != "b" || got[0].FilesFrom != "a" || strings.Join(got[0].Files, " ") != "gossip.key pki/ca.crt" {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].Cmd != "cat > job.yaml <<'EOF'\nkind: X\n# not a directive\nEOF" || got[1].FilesFrom != "" || got[1].Line != 5 {
		t.Errorf("here-document: %+v", got[1])
	}
	if got[2].Line != 9 || got[2].Host != "b" {
		t.Errorf("after it: %+v", got[2])
	}
}

func TestRunChecksOutput(t *testing.T) {
	t.Parallel()
	sh := func(s string) *exec.Cmd { return exec.Command("bash", "-c", s) }
	if _, err := Run(Command{Expect: []string{"hi"}}, "echo hi", sh); err != nil {
		t.Error(err)
	}
	if _, err := Run(Command{Expect: []string{"bye"}}, "echo hi", sh); err == nil {
		t.Error("a missing expected line passes")
	}
	if _, err := Run(Command{}, "exit 3", sh); err == nil {
		t.Error("a failing command passes")
	}
}

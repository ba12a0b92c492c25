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
		"```sh runnable\ncurl -d '{\n```\n",
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

func TestParseContinuedLines(t *testing.T) {
	t.Parallel()
	got, err := Parse("A.md", []byte("```sh runnable\ncurl -d '{\n  \"a\": 1}'\n# expect: ok\nnext |\n  od -c &&\n  true\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Cmd != "curl -d '{\n  \"a\": 1}'" || got[0].Expect[0] != "ok" || got[1].Line != 5 ||
		got[1].Cmd != "next |\n  od -c &&\n  true" {
		t.Errorf("parsed %+v", got)
	}
}

func TestOpenQuote(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`curl -d '{`:                     true,
		`curl -d '{"a": 1}'`:             false,
		`echo "it's"`:                    false,
		`echo 'a\'`:                      false,
		`echo \'`:                        false,
		`echo "a \" b`:                   true,
		`awk '{ print }' # don't`:        false,
		"curl -d '{\n  \"x\": 1}'":       false,
		`printf "%s\n" "$hdr" # it's ok`: false,
	} {
		if got := openQuote(s); got != want {
			t.Errorf("openQuote(%q) = %v, want %v", s, got, want)
		}
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

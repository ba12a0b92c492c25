package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/strata-mesh/strata/internal/clidoc"
)

// runCompletion prints a shell's completion script, made from this
// binary's own help as the packaged scripts are.
func runCompletion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("completion", strings.Join(clidoc.Shells, "|"), stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: strata completion %s\n\n", strings.Join(clidoc.Shells, "|"))
		fmt.Fprintln(stderr, "Print the shell's completion script. Load it with")
		fmt.Fprintln(stderr, "  bash: source <(strata completion bash)")
		fmt.Fprintln(stderr, "  zsh:  strata completion zsh > \"${fpath[1]}/_strata\"")
		fmt.Fprintln(stderr, "  fish: strata completion fish | source")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give a shell: %s", strings.Join(clidoc.Shells, ", "))}
	}
	cmds, err := clidoc.ReadCommands(ownHelp)
	if err != nil {
		return err
	}
	script, err := clidoc.Completion(pos[0], cmds)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, script)
	return err
}

// ownHelp runs this binary's command line in process and returns what it
// printed (clidoc.HelpFunc).
func ownHelp(args ...string) (string, error) {
	var b bytes.Buffer
	if code := run(args, &b, &b); code != 0 {
		return b.String(), fmt.Errorf("strata %s: exit %d", strings.Join(args, " "), code)
	}
	return b.String(), nil
}

// Command gendocs writes strata's shell completions (bash, zsh, fish) and
// its man page from the CLI's own help: it runs `strata -h` for the list of
// commands and `strata COMMAND -h` for each command's flags, so what it
// writes always matches the binary it is given. The scripts are the ones
// `strata completion SHELL` prints (package internal/clidoc makes both).
//
//	go run ./packaging/gendocs -bin bin/strata -out DIR
//
// DIR gets completions/strata.bash, completions/_strata,
// completions/strata.fish and man/strata.1.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/strata-mesh/strata/internal/clidoc"
)

func main() {
	bin := flag.String("bin", "bin/strata", "the strata `binary` to read the help of")
	out := flag.String("out", "", "output `directory`")
	version := flag.String("version", "", "version for the man page's footer")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gendocs: -out is required")
		os.Exit(2)
	}
	if err := run(*bin, *out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(bin, out, version string) error {
	cmds, err := clidoc.ReadCommands(func(args ...string) (string, error) { return help(bin, args...) })
	if err != nil {
		return err
	}
	files := map[string]string{
		"completions/strata.bash": clidoc.Bash(cmds),
		"completions/_strata":     clidoc.Zsh(cmds),
		"completions/strata.fish": clidoc.Fish(cmds),
		"man/strata.1":            clidoc.ManPage(cmds, version),
	}
	for name, text := range files {
		p := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// help runs the binary with args and returns what it printed on stdout and
// stderr together, also when it failed.
func help(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		return b.String(), fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, b.String())
	}
	return b.String(), nil
}

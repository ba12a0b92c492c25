// Package docrun reads and runs the docs' runnable blocks: fenced blocks
// whose info string is "sh runnable", holding commands a reader types, in
// order (CONTRIBUTING.md). Tests run them against a real mesh and fail
// when one fails, so the docs stay true.
//
// In a block:
//
//   - "# expect: TEXT" after a command: its output (stdout and stderr)
//     holds TEXT; there may be several.
//   - "# eventually: TEXT", right after a command: run it again, once a
//     second, until it exits 0 with TEXT in its output.
//   - "# files from HOST: F1 F2 …" before a command: the files an earlier
//     block made on HOST are copied into this one's working directory
//     first, as a reader would with scp.
//   - any other line starting with "#" is a comment; a line ending in "\",
//     "|" or "&&", or inside a quoted string, continues on the next, and a
//     here-document ("<<'EOF'") runs to its terminator.
//
// Fence options after "runnable": needs=CMD (the block is skipped where
// CMD is not in PATH) and host=NAME (its commands run on that host of a
// several-host guide).
package docrun

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

const (
	// Fence opens a runnable block.
	Fence         = "```sh runnable"
	expectPrefix  = "# expect: "
	eventuallyPfx = "# eventually: "
	filesPrefix   = "# files from "
	needsOption   = "needs="
	hostOption    = "host="
	// EventuallyLimit bounds how long "# eventually:" retries a command.
	EventuallyLimit = 60 * time.Second
)

// Command is one command of a runnable block.
type Command struct {
	File string // the document, as given to Parse
	Line int    // its first line, from 1
	// Cmd is the command as written (several lines where it continues).
	Cmd        string
	Expect     []string
	Eventually string
	// Needs lists commands the block needs in PATH.
	Needs []string
	// Host is the block's host= option ("" outside a several-host guide).
	Host string
	// FilesFrom and Files: the "# files from HOST:" line before the
	// command, if any.
	FilesFrom string
	Files     []string
}

// Where is the command's position, FILE:LINE.
func (c Command) Where() string { return fmt.Sprintf("%s:%d", c.File, c.Line) }

var heredoc = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

// Parse returns the commands of src's runnable blocks; file names them in
// errors and in the commands' positions.
func Parse(file string, src []byte) ([]Command, error) {
	var out []Command
	sc := bufio.NewScanner(bytes.NewReader(src))
	n := 0
	in := false
	first := 0 // the index in out of the open block's first command
	var needs []string
	var host, filesFrom string
	var files []string
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !in {
			if trimmed == Fence || strings.HasPrefix(trimmed, Fence+" ") {
				in, needs, host, first = true, nil, "", len(out)
				for _, opt := range strings.Fields(strings.TrimPrefix(trimmed, Fence)) {
					if v, ok := strings.CutPrefix(opt, needsOption); ok {
						needs = append(needs, v)
					} else if v, ok := strings.CutPrefix(opt, hostOption); ok && v != "" {
						host = v
					} else {
						return nil, fmt.Errorf("%s:%d: unknown fence option %q (want %s… or %s…)", file, n, opt, needsOption, hostOption)
					}
				}
			}
			continue
		}
		switch {
		case trimmed == "```":
			if filesFrom != "" {
				return nil, fmt.Errorf("%s:%d: %q precedes no command", file, n, filesPrefix)
			}
			in = false
		case trimmed == "":
		case strings.HasPrefix(trimmed, filesPrefix):
			from, list, ok := strings.Cut(strings.TrimPrefix(trimmed, filesPrefix), ":")
			if !ok || strings.TrimSpace(from) == "" || len(strings.Fields(list)) == 0 {
				return nil, fmt.Errorf("%s:%d: want %q", file, n, filesPrefix+"HOST: FILE…")
			}
			filesFrom, files = strings.TrimSpace(from), strings.Fields(list)
		case strings.HasPrefix(trimmed, expectPrefix), strings.HasPrefix(trimmed, eventuallyPfx):
			if len(out) == first {
				return nil, fmt.Errorf("%s:%d: %q follows no command", file, n, trimmed)
			}
			c := &out[len(out)-1]
			if text, ok := strings.CutPrefix(trimmed, eventuallyPfx); ok {
				if c.Eventually != "" || len(c.Expect) > 0 {
					return nil, fmt.Errorf("%s:%d: # eventually: must come first, once, after its command", file, n)
				}
				c.Eventually = text
			} else {
				c.Expect = append(c.Expect, strings.TrimPrefix(trimmed, expectPrefix))
			}
		case strings.HasPrefix(trimmed, "#"):
			// A comment of the reader's.
		default:
			c := Command{File: file, Line: n, Cmd: line, Needs: needs, Host: host, FilesFrom: filesFrom, Files: files}
			filesFrom, files = "", nil
			for continues(c.Cmd) && sc.Scan() {
				n++
				c.Cmd += "\n" + sc.Text()
			}
			if openQuote(c.Cmd) {
				return nil, fmt.Errorf("%s:%d: a quote is not closed", file, c.Line)
			}
			if m := heredoc.FindStringSubmatch(c.Cmd); m != nil {
				closed := false
				for !closed && sc.Scan() {
					n++
					c.Cmd += "\n" + sc.Text()
					closed = strings.TrimSpace(sc.Text()) == m[1]
				}
				if !closed {
					return nil, fmt.Errorf("%s:%d: the here-document %s is not closed", file, c.Line, m[1])
				}
			}
			out = append(out, c)
		}
	}
	if in {
		return nil, fmt.Errorf("%s: a runnable block is not closed", file)
	}
	return out, sc.Err()
}

// continues says whether the command goes on on the next line: it ends in
// "\\", "|", "&&" or "||", or inside a quoted string.
func continues(cmd string) bool {
	t := strings.TrimSpace(cmd)
	return strings.HasSuffix(t, `\`) || strings.HasSuffix(t, "|") || strings.HasSuffix(t, "&&") || openQuote(cmd)
}

// openQuote says whether s ends inside a quoted string, as the shell reads
// quotes: '…' takes everything literally, "…" and unquoted text take a
// backslash as an escape, and # outside quotes starts a comment.
func openQuote(s string) bool {
	var q byte
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case q == '\'':
			if ch == '\'' {
				q = 0
			}
		case ch == '\\':
			i++
		case q == '"':
			if ch == '"' {
				q = 0
			}
		case ch == '\'' || ch == '"':
			q = ch
		case ch == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t' || s[i-1] == '\n'):
			// A comment runs to the end of its line.
			for i < len(s) && s[i] != '\n' {
				i++
			}
		}
	}
	return q != 0
}

// Missing returns the first of needs that is not in PATH, or "".
func Missing(needs []string) string {
	for _, n := range needs {
		if _, err := exec.LookPath(n); err != nil {
			return n
		}
	}
	return ""
}

// Run runs c's script through cmdFor (which sets where and how it runs)
// and checks its exit status and expected lines. With "# eventually:" it
// runs it again, once a second (a reader's pace: coordinates settle and a
// job runs in seconds), until it exits 0 with the text in its output or
// EventuallyLimit passes. It returns the last output.
func Run(c Command, script string, cmdFor func(script string) *exec.Cmd) (string, error) {
	deadline := time.Now().Add(EventuallyLimit)
	for {
		b, err := cmdFor(script).CombinedOutput()
		out := string(b)
		if c.Eventually != "" && (err != nil || !strings.Contains(out, c.Eventually)) {
			if time.Now().After(deadline) {
				return out, fmt.Errorf("output lacks %q after %s of tries (last: %v)", c.Eventually, EventuallyLimit, err)
			}
			// The cadence of a "# eventually:" retry, as a user running the
			// command again would; bounded by the deadline above.
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			return out, err
		}
		for _, want := range c.Expect {
			if !strings.Contains(out, want) {
				return out, fmt.Errorf("output lacks %q", want)
			}
		}
		return out, nil
	}
}

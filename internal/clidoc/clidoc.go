// Package clidoc reads strata's command list and flags from the CLI's own
// help (`strata -h`, `strata COMMAND -h`) and writes shell completions
// (bash, zsh, fish) and the man page from it, so that what it writes
// always matches the binary that printed the help. The release build
// runs it over the built binary (packaging/gendocs); `strata completion`
// runs it over its own help, in process: one source for both.
//
//	cmds, err := clidoc.ReadCommands(help)
//	fmt.Print(clidoc.Bash(cmds))
package clidoc

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// Command is one `strata COMMAND` with its flags, as its help prints them.
type Command struct {
	Name, Args, Summary string
	Flags               []Flag
}

// Flag is one flag from the flag package's PrintDefaults.
type Flag struct {
	Name  string // without the dash
	Arg   string // the value's name ("file", "HOST:PORT"); "" for a boolean
	Usage string
}

// HelpFunc returns what `strata ARGS...` printed on stdout and stderr
// together; err is set when it failed, and the text is still used (a
// command whose -h is not a flag exits non-zero).
type HelpFunc func(args ...string) (string, error)

// Shells are the shells Completion writes for.
var Shells = []string{"bash", "zsh", "fish"}

// Completion returns the completion script for shell (one of Shells).
func Completion(shell string, cmds []Command) (string, error) {
	switch shell {
	case "bash":
		return Bash(cmds), nil
	case "zsh":
		return Zsh(cmds), nil
	case "fish":
		return Fish(cmds), nil
	}
	return "", fmt.Errorf("no completion for shell %q: use %s", shell, strings.Join(Shells, ", "))
}

// ReadCommands lists the commands of `strata -h` with the arguments and
// flags each one's -h prints.
func ReadCommands(help HelpFunc) ([]Command, error) {
	top, err := help("-h")
	if err != nil {
		return nil, err
	}
	var cmds []Command
	in := false
	for _, line := range strings.Split(top, "\n") {
		switch {
		case strings.HasPrefix(line, "Commands:"):
			in = true
		case in && strings.HasPrefix(line, "  "):
			name, summary, _ := strings.Cut(strings.TrimSpace(line), " ")
			cmds = append(cmds, Command{Name: name, Summary: strings.TrimSpace(summary)})
		case in && strings.TrimSpace(line) == "":
			in = false
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("strata -h listed no commands")
	}
	for i := range cmds {
		// A command whose -h is not a flag (`strata token -h`) exits
		// non-zero; what it printed still has its usage, if any.
		text, _ := help(cmds[i].Name, "-h")
		cmds[i].Args, cmds[i].Flags = ParseUsage(cmds[i].Name, text)
	}
	return cmds, nil
}

// ParseUsage reads "Usage: strata NAME ARGS" and the flag package's
// PrintDefaults lines:
//
//	-name arg
//	  	usage
//	-x	usage
func ParseUsage(name, text string) (string, []Flag) {
	var args string
	var flags []Flag
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Usage: strata "+name):
			args = strings.TrimSpace(strings.TrimPrefix(line, "Usage: strata "+name))
		case strings.HasPrefix(line, "  -"):
			head, usage, _ := strings.Cut(strings.TrimPrefix(line, "  -"), "\t")
			n, arg, _ := strings.Cut(head, " ")
			flags = append(flags, Flag{Name: strings.TrimSpace(n), Arg: strings.TrimSpace(arg), Usage: strings.TrimSpace(usage)})
		case strings.HasPrefix(line, "    \t") && len(flags) > 0:
			f := &flags[len(flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(line))
		}
	}
	return args, flags
}

// fileArg says whether a flag's value is a path, so shells complete files.
func fileArg(f Flag) bool {
	switch f.Arg {
	case "file", "FILE", "path", "DIR", "directory":
		return true
	}
	return false
}

// Bash returns the bash completion script.
func Bash(cmds []Command) string {
	var b strings.Builder
	b.WriteString("# bash completion for strata; generated from `strata COMMAND -h`.\n")
	b.WriteString("_strata() {\n\tlocal cur prev words cword\n")
	b.WriteString("\tcur=${COMP_WORDS[COMP_CWORD]}\n\tprev=${COMP_WORDS[COMP_CWORD-1]}\n")
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name
	}
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(names, " "))
	b.WriteString("\tcase \"${COMP_WORDS[1]}\" in\n")
	for _, c := range cmds {
		var opts, files []string
		for _, f := range c.Flags {
			opts = append(opts, "-"+f.Name)
			if fileArg(f) {
				files = append(files, "-"+f.Name)
			}
		}
		fmt.Fprintf(&b, "\t%s)\n", c.Name)
		if len(files) > 0 {
			fmt.Fprintf(&b, "\t\tcase \"$prev\" in %s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;; esac\n", strings.Join(files, "|"))
		}
		fmt.Fprintf(&b, "\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\t;;\n", strings.Join(opts, " "))
	}
	b.WriteString("\tesac\n}\ncomplete -o default -F _strata strata\n")
	return b.String()
}

// zshQuote makes s safe inside a single-quoted _arguments spec.
func zshQuote(s string) string {
	s = strings.NewReplacer("'", "'\\''", "[", "\\[", "]", "\\]", ":", "\\:").Replace(s)
	return s
}

// Zsh returns the zsh completion script (a #compdef file).
func Zsh(cmds []Command) string {
	var b strings.Builder
	b.WriteString("#compdef strata\n# zsh completion for strata; generated from `strata COMMAND -h`.\n\n")
	b.WriteString("_strata() {\n\tlocal -a commands\n\tcommands=(\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\t\t'%s:%s'\n", c.Name, zshQuote(c.Summary))
	}
	b.WriteString("\t)\n\tif (( CURRENT == 2 )); then\n\t\t_describe 'command' commands\n\t\treturn\n\tfi\n")
	b.WriteString("\tlocal cmd=${words[2]}\n\tshift words\n\t(( CURRENT-- ))\n\tcase $cmd in\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\t%s)\n\t\t_arguments", c.Name)
		for _, f := range c.Flags {
			spec := fmt.Sprintf("-%s[%s]", f.Name, zshQuote(f.Usage))
			switch {
			case fileArg(f):
				spec += ":" + zshQuote(f.Arg) + ":_files"
			case f.Arg != "":
				spec += ":" + zshQuote(f.Arg) + ": "
			}
			fmt.Fprintf(&b, " \\\n\t\t\t'%s'", spec)
		}
		b.WriteString(" \\\n\t\t\t'*:argument:_files'\n\t\t;;\n")
	}
	b.WriteString("\tesac\n}\n\n_strata \"$@\"\n")
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer("\\", "\\\\", "'", "\\'").Replace(s) + "'"
}

// Fish returns the fish completion script.
func Fish(cmds []Command) string {
	var b strings.Builder
	b.WriteString("# fish completion for strata; generated from `strata COMMAND -h`.\n")
	b.WriteString("complete -c strata -f\n")
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	all := strings.Join(names, " ")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c strata -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n", all, c.Name, fishQuote(c.Summary))
	}
	for _, c := range cmds {
		for _, f := range c.Flags {
			// Go flags take one dash; fish's -o is an "old style" long option.
			line := fmt.Sprintf("complete -c strata -n '__fish_seen_subcommand_from %s' -o %s -d %s", c.Name, f.Name, fishQuote(f.Usage))
			switch {
			case fileArg(f):
				line += " -r -F"
			case f.Arg != "":
				line += " -r"
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// roff escapes text for a man page: backslashes, and a leading dot or
// quote that roff would read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// ManPage returns strata(1) in roff; version goes in its footer, and its
// date is SOURCE_DATE_EPOCH's when set (reproducible builds), else today.
func ManPage(cmds []Command, version string) string {
	var b strings.Builder
	date := time.Now().UTC().Format("2006-01-02")
	if t := os.Getenv("SOURCE_DATE_EPOCH"); t != "" {
		var sec int64
		if _, err := fmt.Sscan(t, &sec); err == nil {
			date = time.Unix(sec, 0).UTC().Format("2006-01-02")
		}
	}
	fmt.Fprintf(&b, ".\\\" Generated from `strata COMMAND -h`; do not edit.\n")
	fmt.Fprintf(&b, ".TH STRATA 1 %q %q \"strata manual\"\n", date, "strata "+version)
	b.WriteString(".SH NAME\nstrata \\- a mesh of agents that places, serves and monitors models across edge, on-prem and cloud hosts\n")
	b.WriteString(".SH SYNOPSIS\n.B strata\n.I COMMAND\n.RI [ ARGS ]\n")
	b.WriteString(".SH DESCRIPTION\nOne binary: \\fBstrata agent\\fR runs on every host and joins the mesh; the other commands ask an agent's HTTP API (\\fB$STRATA_ADDR\\fR, default 127.0.0.1:7470) what the mesh knows, or change it.\n")
	b.WriteString(".SH COMMANDS\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, ".SS \"%s %s\"\n%s\n", roff(c.Name), roff(c.Args), roff(c.Summary))
		for _, f := range c.Flags {
			b.WriteString(".TP\n")
			if f.Arg != "" {
				fmt.Fprintf(&b, ".BI \"\\-%s \" %s\n", roff(f.Name), roff(f.Arg))
			} else {
				fmt.Fprintf(&b, ".B \\-%s\n", roff(f.Name))
			}
			b.WriteString(roff(f.Usage) + "\n")
		}
	}
	b.WriteString(".SH FILES\n.TP\n.I /etc/strata/agent.yaml\nthe agent's configuration; flags override it\n")
	b.WriteString(".TP\n.I /etc/strata/credentials/\nsecrets (gossip\\-key, api\\-token), root only; the systemd unit hands them to the agent with LoadCredential=\n")
	b.WriteString(".TP\n.I /var/lib/strata\nthe agent's identity key, database and artifacts\n")
	b.WriteString(".TP\n.I /usr/lib/strata/libonnxruntime.so.1\nthe ONNX Runtime library the packaged agent serves models with\n")
	b.WriteString(".SH ENVIRONMENT\n.TP\n.B STRATA_GOSSIP_KEY, STRATA_API_TOKEN\nsecrets for the agent, instead of files\n")
	b.WriteString(".TP\n.B STRATA_ORT_LIB\nthe ONNX Runtime library, when the configuration names none\n")
	b.WriteString(".SH SEE ALSO\n.BR systemctl (1),\n.BR journalctl (1)\n")
	return b.String()
}

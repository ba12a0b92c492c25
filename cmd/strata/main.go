// Command strata is the strata agent and its CLI.
//
//	strata agent -config /etc/strata/agent.yaml   run an agent
//	strata dev                                     a multi-tier mesh in one process
//	strata members | sites | nodes | node NAME     ask an agent what the mesh knows
//	strata keygen                                  make a gossip key
//	strata version                                 the version and the commit built from
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// exitError carries a specific exit code: 1 for errors, 2 for "ran, but the
// answer is no" (as nomad job plan does).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

type command struct {
	name, args, summary string
	run                 func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"agent", "[flags]", "run an agent on this host", runAgent},
		{"dev", "[--agents N] [--dir DIR] [--once]", "run a multi-tier dev mesh in one process on loopback", runDev},
		{"health", "[-o json|yaml]", "say whether the agent is ok or degraded, and why (exit 2: degraded)", runHealth},
		{"members", "[-o json|yaml]", "list the members of the mesh and their status, then the sites", runMembers},
		{"sites", "[-o json|yaml]", "list the sites, their nodes and whether each is reachable", runSites},
		{"nodes", "[-tier T] [-site S] [-label k=v] [-o wide|json|yaml]", "list nodes with their capabilities", runNodes},
		{"node", "NAME|ID [-o json|yaml]", "show one node", runNode},
		{"rtt", "NODE [NODE]", "estimated round-trip time between two nodes", runRTT},
		{"plan", "-f FILE [--why NODE] [-o json|yaml]", "show where policies would be placed, and why (exit 2: something cannot be placed)", runPlan},
		{"apply", "-f FILE [--wait [--timeout 5m]]", "apply policies: the mesh places them and keeps them placed (--wait: until placed and serving; exit 2: one failed or the wait timed out)", runApply},
		{"delete", "KIND/NAME ... | KIND NAME | -f FILE", "delete policies: those named (kinds in any case: InferenceService, isvc, trainingjob, tj) or every one in FILE", runDelete},
		{"get", "KIND [NAME] [-o wide|json|yaml]", "list objects of a kind, or show one, as the kind's own command does (kinds: " + kindNames() + "; singular and short forms too)", runGet},
		{"describe", "KIND/NAME", "show one object for people: a policy with its placement, replicas, recent events and source; a node, job, model or experiment", runDescribe},
		{"policies", "[NAME] [-kind KIND] [-o json|yaml]", "list the applied policies, or show one", runPolicies},
		{"placements", "[POLICY ...] [-o wide|json|yaml]", "show where every policy (or those named) is placed", runPlacements},
		{"drift", "[MODEL] [-o json|yaml]", "show drift monitors: scores per model, site and feature", runDrift},
		{"jobs", "[-o json|yaml]", "list training jobs", runJobs},
		{"experiments", "[NAME] [-o json|yaml]", "list hyperparameter searches, or one with its trials (best marked *)", runExperiments},
		{"logs", "JOB [-rank N] [-f]", "print a training job's output (-f: follow it until the job ends)", runLogs},
		{"events", "[-since SEQ] [-follow=false] [-o json|yaml]", "follow the mesh's placements, drift, jobs and rollouts as they happen (-follow=false: print the kept ones and exit)", runEvents},
		{"push", "FILE|DIR --name N --version V [--kind dataset|code] [--reference FILE]", "publish a signed model, dataset or training code version", runPush},
		{"models", "[NAME] [-o json|yaml]", "list model versions and the nodes that hold them; with NAME, each version's inputs, outputs, operator sets and producer", runModels},
		{"pull", "NAME[:VERSION]", "fetch an artifact to the agent from the nearest holders", runPull},
		{"sim", "[-nodes N] [-sites N] [-trace FILE | -load diurnal] [-o json|yaml] | -what-if CHANGE", "compare placement strategies over a generated estate and workload, or serving strategies over a day of load and failures (-load), or ask what a change would do to the live mesh (exit 2: a policy becomes infeasible)", runSim},
		{"lineage", "MODEL[:VERSION] [-o json|yaml]", "show what made a model version (job, parameters, data, metrics, the version it retrained) back to the first, and where it is served", runLineage},
		{"token", "new | hash TOKEN", "make an API token, or hash one for acl_tokens in the agent's config", runToken},
		{"keyring", "[install|use|remove KEY]", "list the agent's gossip keys, or install, use or remove one (key rotation: each step on every agent)", runKeyring},
		{"keygen", "[-pki DIR]", "print a new gossip key; with -pki also make the mesh CA and a signing key", runKeygen},
		{"completion", "bash|zsh|fish", "print a shell's completion script (bash: source <(strata completion bash))", runCompletion},
		{"version", "[-o json|yaml]", "print the version, the commit built from and the Go version", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: strata COMMAND [ARGS]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nFlags of every command that asks an agent, before or after the command:\n"+
		"  -address URL   the agent's API (default $STRATA_ADDR, else http://127.0.0.1:7470)\n"+
		"  -token TOKEN   an API token (default $STRATA_TOKEN, else $STRATA_API_TOKEN)\n"+
		"  -o FORMAT      table, json or yaml (wide too, for nodes and placements)\n")
	fmt.Fprintf(w, "\nRun 'strata COMMAND -h' for a command's flags.\n")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 1
		}
		return 0
	}
	args = hoistFlags(args)
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		if err == nil || errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(stderr, "strata "+c.name+":", ee.err)
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "strata "+c.name+":", err)
		return 1
	}
	fmt.Fprintf(stderr, "strata: unknown command %q\n\n", args[0])
	usage(stderr)
	return 1
}

// globalValueFlags are the client flags that take a value; they may come
// before the command as well as after it.
var globalValueFlags = map[string]bool{"address": true, "o": true, "token": true}

// hoistFlags moves flags written before the command to just after it, so
// that `strata -address URL -o json members` is `strata members -address
// URL -o json`, as kubectl and nomad take them. Arguments that start
// with a command are returned as they are.
func hoistFlags(args []string) []string {
	var lead []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			if len(lead) == 0 {
				return args
			}
			return slices.Concat([]string{a}, lead, args[i+1:])
		}
		lead = append(lead, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if globalValueFlags[name] && !hasValue && i+1 < len(args) {
			i++
			lead = append(lead, args[i])
		}
	}
	return args
}

func newFlags(name, args string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: strata %s %s\n\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses fs and returns the positional arguments, which may come
// before, between or after the flags ("strata node gpu-1 -o json",
// "strata pull --kind dataset x:1 --output f"). After "--" every argument
// is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
		}
		if len(args) == 0 {
			return pos, nil
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		// Parse also stops after a "--", which it drops.
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		args = rest
	}
}

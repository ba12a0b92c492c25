package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

func readPolicyFile(path string) ([]byte, string, error) {
	if path == "" {
		return nil, "", fmt.Errorf("-f FILE is required (- reads standard input)")
	}
	if path == "-" {
		b, err := io.ReadAll(os.Stdin)
		return b, "stdin", err
	}
	b, err := os.ReadFile(path)
	return b, filepath.Base(path), err
}

func runPlan(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", "-f FILE [--why NODE] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	file := fs.String("f", "", "policy `file` (YAML, several documents allowed; - for stdin)")
	why := fs.String("why", "", "also explain why `NODE` was or was not chosen")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	body, name, err := readPolicyFile(*file)
	if err != nil {
		return err
	}
	var raw []byte
	results, err := c.client().Plan(context.Background(), name, body, *why, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	all := true
	for _, r := range results {
		// A policy handed to another site is placed there.
		// So is a service whose overflow the burst tiers take.
		all = all && (r.Decision != nil && (r.Decision.Feasible || len(r.Decision.Placements)+len(r.Burst) >= r.Decision.Wanted) || r.HandOff != nil)
		for _, w := range r.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	}
	if c.structured() {
		if err := c.emit(stdout, raw); err != nil {
			return err
		}
	} else {
		for i, r := range results {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprint(stdout, strings.TrimRight(r.Explanation, "\n")+"\n")
			if r.Why != "" {
				fmt.Fprintf(stdout, "\n%s\n", strings.TrimRight(r.Why, "\n"))
			}
		}
	}
	if !all {
		// As `nomad job plan`: 2 means it ran, but something cannot be placed.
		return &exitError{code: 2}
	}
	return nil
}

func runApply(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apply", "-f FILE [--wait [--timeout 5m]] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	file := fs.String("f", "", "policy `file` (YAML, several documents allowed; - for stdin)")
	wait := fs.Bool("wait", false, "wait until every policy is placed and serving (a training job running or done, a sweep running); exit 2 if one fails or at the timeout")
	timeout := fs.Duration("timeout", 5*time.Minute, "with --wait, how long to wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	body, name, err := readPolicyFile(*file)
	if err != nil {
		return err
	}
	var raw []byte
	results, err := c.client().Apply(context.Background(), name, body, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	for _, r := range results {
		if !c.structured() {
			verb := "applied"
			if !r.Changed {
				verb = "unchanged"
			}
			fmt.Fprintf(stdout, "%s %s (generation %d)\n", r.Policy, verb, r.Generation)
		}
		for _, w := range r.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	}
	if c.structured() {
		if err := c.emit(stdout, raw); err != nil {
			return err
		}
	}
	if !*wait {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return c.explain(waitApplied(ctx, c.client(), results, stderr, applyWaitEvery, *timeout))
}

func runPlacements(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("placements", "[POLICY ...] [-o wide|json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	ps, err := c.client().Placements(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if len(pos) > 0 {
		ps = slices.DeleteFunc(ps, func(p api.PlacementStatus) bool {
			return !slices.ContainsFunc(pos, func(named string) bool { return matchPolicy(p.Policy, named) })
		})
		if len(ps) == 0 {
			return fmt.Errorf("no placement of %s", strings.Join(pos, ", "))
		}
		if c.structured() {
			return c.emitValue(stdout, ps)
		}
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	return printPlacements(stdout, ps, c.wide())
}

// printPlacements prints the placements table; wide adds each policy's
// generation (applied and placed), the replicas wanted and the time of the
// last change.
func printPlacements(w io.Writer, ps []api.PlacementStatus, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hdr, extra := "POLICY\tSTATE\tNODES\tOWNER\tEPOCH\tMESSAGE", ""
	if wide {
		hdr, extra = "POLICY\tSTATE\tNODES\tOWNER\tEPOCH\tGENERATION\tWANTED\tUPDATED\tMESSAGE", "\t\t\t"
	}
	fmt.Fprintln(tw, hdr)
	for _, p := range ps {
		var names []string
		for _, n := range p.Nodes {
			name := n.Name
			if n.Replica != "" && n.Replica != "serving" {
				name += "(" + n.Replica + ")" // the reason is in the message
			}
			names = append(names, name)
		}
		cols := fmt.Sprintf("%s\t%s\t%s\t%s\t%d", p.Policy, p.State, dash(strings.Join(names, ",")), dash(p.Owner), p.Epoch)
		if wide {
			gen := fmt.Sprint(p.Generation)
			if p.PlacedGeneration != 0 && p.PlacedGeneration != p.Generation {
				gen += fmt.Sprintf(" (placed %d)", p.PlacedGeneration)
			}
			updated := "-"
			if !p.Updated.IsZero() {
				updated = p.Updated.Local().Format(time.DateTime)
			}
			cols += fmt.Sprintf("\t%s\t%d\t%s", gen, p.Wanted, updated)
		}
		fmt.Fprintf(tw, "%s\t%s\n", cols, p.Message)
		if r := p.Rollout; r != nil {
			ver := r.From
			if r.To != "" {
				ver += "→" + r.To
			}
			fmt.Fprintf(tw, "  rollout %d\t%s\t%s\t\t%s\t%s\n", r.Seq, r.Stage, r.Model+"@"+ver, extra, r.Message)
		}
	}
	return tw.Flush()
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/sim"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

var _ flag.Value = (*stringList)(nil)

func runSim(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sim", "[-nodes N] [-sites N | -live] [-policies N | -trace FILE | -load diurnal [-hours H] [-step D]] [-plots DIR] [-o json|yaml] | -what-if CHANGE ...", stderr)
	c := addClientFlags(fs)
	nodes := fs.Int("nodes", 10000, "nodes in the generated estate")
	sites := fs.Int("sites", 0, "sites in the generated estate (0: edge sites of 4–24 nodes)")
	regions := fs.Int("regions", 0, "regions in the generated estate (0: one per 1000 nodes, at least 3)")
	seed := fs.Uint64("seed", 1, "seed of the estate, the trace and the random strategy")
	policies := fs.Int("policies", 1000, "arrivals in the generated trace (services and training jobs)")
	traceFile := fs.String("trace", "", "replay this trace (CSV or YAML) instead of generating one")
	genTrace := fs.String("gen-trace", "", "write the generated trace to `FILE` (CSV) and exit")
	strategies := fs.String("strategies", strings.Join(sim.Strategies, ","), "strategies to compare, comma-separated (with -load: "+strings.Join(sim.ServeStrategies, ",")+")")
	load := fs.String("load", "", "replay a generated serving load of this `SHAPE` ("+strings.Join(sim.LoadShapes, ", ")+") and compare serving strategies instead of placement strategies")
	hours := fs.Float64("hours", 24, "with -load: hours of load, from 00:00 UTC")
	step := fs.Duration("step", 5*time.Minute, "with -load: the time step (the load is constant within a step; the autoscaler looks once a step)")
	services := fs.Int("services", 0, "with -load: InferenceServices (0: one per edge site)")
	nodeFailures := fs.Int("node-failures", 0, "with -load: node failures over the load (0: one an hour; -1: none)")
	siteFailures := fs.Int("site-failures", 0, "with -load: edge site failures over the load (0: one per 8 hours, at most one edge site in 10; -1: none)")
	live := fs.Bool("live", false, "replay over the live mesh's nodes, as its placement engine sees them now, instead of a generated estate (RTT is then the coordinates' estimate)")
	plots := fs.String("plots", "", "write strata-sim-strategies.svg and strata-sim-map.svg (with -load: strata-sim-serve.svg and strata-sim-replicas.svg) to `DIR` (default: no plots)")
	var whatIf stringList
	fs.Var(&whatIf, "what-if", "plan the live mesh's policies with this `CHANGE` (repeatable): 'site NAME down', 'node NAME down', 'add N nodes like NODE [in rack R] [in site S]' (in another site: placed at that site, whose clients stay put), 'policy NAME latency.p99=10ms [replicas=N]'")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("unexpected argument %q", pos[0])}
	}
	if err := c.check(); err != nil {
		return err
	}
	if len(whatIf) > 0 {
		return runWhatIf(c, whatIf, stdout)
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *load == "" {
		for _, name := range []string{"hours", "step", "services", "node-failures", "site-failures"} {
			if set[name] {
				return &exitError{code: 1, err: fmt.Errorf("-%s needs -load", name)}
			}
		}
	} else if *traceFile != "" || *genTrace != "" || set["policies"] {
		return &exitError{code: 1, err: fmt.Errorf("-load generates its own load: -trace, -gen-trace and -policies do not apply")}
	}

	var topo *sim.Topology
	if *live {
		topo, err = liveTopology(c)
	} else {
		topo, err = sim.Generate(sim.Options{Nodes: *nodes, Sites: *sites, Regions: *regions, Seed: *seed})
	}
	if err != nil {
		return err
	}
	if *load != "" {
		serveStrategies := sim.ServeStrategies
		if set["strategies"] {
			serveStrategies = splitList(*strategies)
		}
		return runServe(c, topo, sim.LoadOptions{Shape: *load, Duration: time.Duration(*hours * float64(time.Hour)), Step: *step,
			Services: *services, NodeFailures: *nodeFailures, SiteFailures: *siteFailures, Seed: *seed},
			sim.ServeOptions{Strategies: serveStrategies, Seed: *seed}, *plots, stdout, stderr)
	}
	var evs []sim.Event
	if *traceFile != "" {
		f, err := os.Open(*traceFile)
		if err != nil {
			return err
		}
		evs, err = sim.ReadTrace(*traceFile, f)
		f.Close()
		if err != nil {
			return err
		}
	} else {
		evs = topo.Trace(sim.TraceOptions{Policies: *policies, Seed: *seed})
	}
	if *genTrace != "" {
		f, err := os.Create(*genTrace)
		if err != nil {
			return err
		}
		if err := sim.WriteCSV(f, evs); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %d events to %s\n", len(evs), *genTrace)
		return nil
	}
	names := splitList(*strategies)
	fmt.Fprintf(stderr, "replaying %d events over %d nodes in %d sites with %d strategies...\n", len(evs), len(topo.Nodes), len(topo.Sites), len(names))
	start := time.Now()
	rep, err := sim.Run(topo, evs, sim.RunOptions{Strategies: names, Seed: *seed, Progress: func(r sim.Result) {
		fmt.Fprintf(stderr, "  %-13s done in %s\n", r.Strategy, r.Elapsed.Round(10*time.Millisecond))
	}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(10*time.Millisecond))
	if *plots != "" {
		files, err := writePlots(*plots, topo, rep)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintf(stderr, "wrote %s\n", f)
		}
	}
	if c.structured() {
		return c.emitValue(stdout, rep)
	}
	return rep.WriteTable(stdout)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// runServe generates a serving load over topo, replays it with the
// serving strategies and prints the comparison.
func runServe(c *clientFlags, topo *sim.Topology, lo sim.LoadOptions, so sim.ServeOptions, plots string, stdout, stderr io.Writer) error {
	if lo.Duration <= 0 || lo.Step <= 0 {
		return &exitError{code: 1, err: fmt.Errorf("-hours and -step must be positive")}
	}
	lt, err := topo.LoadTrace(lo)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "replaying %s of %s load (%d services, %d client sites, %d failures) over %d nodes in %d sites with %d strategies...\n",
		lt.Duration(), lt.Shape, len(lt.Services), len(lt.Pairs), len(lt.Failures), len(topo.Nodes), len(topo.Sites), len(so.Strategies))
	start := time.Now()
	so.Progress = func(r sim.ServeResult) {
		fmt.Fprintf(stderr, "  %-25s done in %s\n", r.Strategy, r.Elapsed.Round(10*time.Millisecond))
	}
	rep, err := sim.Serve(topo, lt, so)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(10*time.Millisecond))
	if plots != "" {
		if err := os.MkdirAll(plots, 0o755); err != nil {
			return err
		}
		for _, p := range []struct {
			name string
			draw func(io.Writer, *sim.ServeReport) error
		}{{"strata-sim-serve.svg", sim.WriteServeSVG}, {"strata-sim-replicas.svg", sim.WriteReplicasSVG}} {
			name := filepath.Join(plots, p.name)
			if err := writeFile(name, func(w io.Writer) error { return p.draw(w, rep) }); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "wrote %s\n", name)
		}
	}
	if c.structured() {
		return c.emitValue(stdout, rep)
	}
	return rep.WriteTable(stdout)
}

// writeFile creates name and writes it with draw.
func writeFile(name string, draw func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := draw(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePlots writes the strategy comparison and the map of strata's
// placements (or the first strategy's) to dir.
func writePlots(dir string, topo *sim.Topology, rep *sim.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := rep.Results[0]
	for _, r := range rep.Results {
		if r.Strategy == sim.StrategyStrata {
			res = r
		}
	}
	out := []string{filepath.Join(dir, "strata-sim-strategies.svg"), filepath.Join(dir, "strata-sim-map.svg")}
	if err := writeFile(out[0], func(w io.Writer) error { return sim.WriteStrategiesSVG(w, rep) }); err != nil {
		return nil, err
	}
	if err := writeFile(out[1], func(w io.Writer) error { return sim.WriteMapSVG(w, topo, res) }); err != nil {
		return nil, err
	}
	return out, nil
}

// runWhatIf asks the agent to plan its policies with the changes. Exit 2
// when a policy would become infeasible.
// liveTopology is the mesh's nodes as the agent's controller would place
// on them: free what no admitted assignment holds.
func liveTopology(c *clientFlags) (*sim.Topology, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw []byte
	if _, err := c.client().Nodes(ctx, client.NodeFilter{}, client.Body(&raw)); err != nil {
		return nil, c.explain(err)
	}
	var nodes []mesh.Node
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return nil, fmt.Errorf("reading the mesh's nodes: %w", err)
	}
	snap, err := meshview.Snapshot(nodes, "")
	if err != nil {
		return nil, err
	}
	return sim.FromNodes(snap.Nodes())
}

func runWhatIf(c *clientFlags, changes []string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw []byte
	rep, err := c.client().WhatIf(ctx, changes, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		if err := c.emit(stdout, raw); err != nil {
			return err
		}
	} else {
		writeWhatIf(stdout, rep)
	}
	for _, o := range rep.Outcomes {
		if o.Status == "becomes infeasible" {
			return &exitError{code: 2}
		}
	}
	return nil
}

func writeWhatIf(w io.Writer, rep api.WhatIfReport) {
	affected := 0
	for _, o := range rep.Outcomes {
		if o.Status != "unchanged" {
			affected++
		}
	}
	fmt.Fprintf(w, "what if %s: %d of %d policies change (planned in %s)\n\n", strings.Join(rep.Changes, "; "), affected, rep.Policies, rep.Elapsed.Round(time.Microsecond))
	if len(rep.Outcomes) == 0 {
		fmt.Fprintln(w, "no policies are applied")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tOUTCOME\tNOW\tWITH THE CHANGE\tWHY")
	for _, o := range rep.Outcomes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Policy, o.Status, nodeList(o.Before), nodeList(o.After), dash(o.Why))
	}
	tw.Flush()
}

func nodeList(ns []string) string {
	if len(ns) == 0 {
		return "-"
	}
	return strings.Join(ns, ",")
}

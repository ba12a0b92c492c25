package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

func runExperiments(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("experiments", "[NAME] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("at most one experiment NAME")}
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	if len(pos) == 1 {
		e, err := c.client().Experiment(ctx, pos[0], client.Body(&raw))
		if err != nil {
			return c.explain(err)
		}
		if c.structured() {
			return c.emit(stdout, raw)
		}
		writeExperiment(stdout, e)
		return nil
	}
	es, err := c.client().Experiments(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	if len(es) == 0 {
		fmt.Fprintln(stdout, "no experiments (a TrainingJob with a sweep: block starts one)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tSTATE\tALGORITHM\tTRIALS\tBEST\tMODEL\tMESSAGE")
	for _, e := range es {
		best, model := "-", "-"
		if e.Best >= 0 && e.Best < len(e.Trials) {
			best = fmt.Sprintf("%s=%.4g", e.Metric, e.Trials[e.Best].Value)
		}
		if e.Version != "" {
			model = e.Model + "@" + e.Version
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Name, e.State, e.Algorithm, len(e.Trials), best, model, dash(e.Message))
	}
	return tw.Flush()
}

// writeExperiment prints one search: its state, then a row per trial,
// the best marked with *.
func writeExperiment(w io.Writer, e api.Experiment) {
	fmt.Fprintf(w, "%s: %s, %s search, %s %s\n", e.Name, e.State, e.Algorithm, e.Goal, e.Metric)
	if e.Message != "" {
		fmt.Fprintf(w, "%s\n", e.Message)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tTRIAL\tSTATE\t%s\tCURVE\tNODE\tDURATION\tPARAMETERS\n", strings.ToUpper(e.Metric))
	var notes []string // why trials failed or stopped, numbered in the table
	for i, tr := range e.Trials {
		mark, value, dur := "", "-", "-"
		if i == e.Best {
			mark = "*"
		}
		if tr.HasValue || tr.State == "stopped" {
			value = fmt.Sprintf("%.4f", tr.Value)
		}
		if !tr.Started.IsZero() && !tr.Finished.IsZero() {
			dur = tr.Finished.Sub(tr.Started).Round(time.Millisecond).String()
		}
		var ps []string
		for _, k := range slices.Sorted(maps.Keys(tr.Params)) {
			ps = append(ps, k+"="+tr.Params[k])
		}
		state := tr.State
		if tr.Error != "" {
			notes = append(notes, tr.Job+": "+tr.Error)
			state = fmt.Sprintf("%s (%d)", tr.State, len(notes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, tr.Job, state, value, curveLine(tr.Curve, 16), dash(tr.Node), dur, strings.Join(ps, " "))
	}
	tw.Flush()
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
	for k, n := range notes {
		fmt.Fprintf(w, "(%d) %s\n", k+1, n)
	}
}

// curveLine draws a curve in at most width block characters (a longer
// curve is sampled evenly, its last point kept), with its step count.
func curveLine(curve []float64, width int) string {
	if len(curve) == 0 {
		return "-"
	}
	pts := curve
	if len(pts) > width {
		pts = make([]float64, width)
		for i := range pts {
			pts[i] = curve[i*(len(curve)-1)/(width-1)]
		}
	}
	lo, hi := slices.Min(pts), slices.Max(pts)
	levels := []rune("▁▂▃▄▅▆▇█")
	var b strings.Builder
	for _, v := range pts {
		k := len(levels) / 2
		if hi > lo {
			k = int((v - lo) / (hi - lo) * float64(len(levels)-1))
		}
		b.WriteRune(levels[k])
	}
	return fmt.Sprintf("%s %d", b.String(), len(curve))
}

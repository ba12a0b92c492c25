package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

func runLineage(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lineage", "MODEL[:VERSION] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("MODEL[:VERSION] is required")}
	}
	if err := c.check(); err != nil {
		return err
	}
	name, version, _ := strings.Cut(pos[0], ":")
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	chain, err := c.client().Lineage(ctx, name, version, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	writeLineage(stdout, chain, time.Local)
	return nil
}

// writeLineage prints a chain newest first: each version, what made it,
// where it is served, then the version it was retrained from; times in loc.
func writeLineage(w io.Writer, chain api.LineageChain, loc *time.Location) {
	for i, st := range chain.Chain {
		if i > 0 {
			fmt.Fprintln(w, "  ↑ retrained from")
		}
		fmt.Fprintf(w, "%s  %.12s  created %s\n", st.Model.Name+"@"+st.Model.Version, st.Model.Digest, st.Created.In(loc).Format(time.DateTime))
		l := st.Lineage
		if l == nil {
			fmt.Fprintln(w, "  no training lineage recorded: pushed, or trained before strata recorded lineage")
		} else {
			took := ""
			if !l.Started.IsZero() {
				took = ", " + l.Finished.Sub(l.Started).Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "  trained by job %s (%s generation %d, %s) on %s%s\n", l.Job, l.Policy, l.Generation, l.Launcher, strings.Join(l.Nodes, ","), took)
			if len(l.Params) > 0 {
				var ps []string
				for _, k := range slices.Sorted(maps.Keys(l.Params)) {
					ps = append(ps, k+"="+l.Params[k])
				}
				fmt.Fprintf(w, "    params:  %s\n", strings.Join(ps, " "))
			}
			if len(l.Command) > 0 {
				fmt.Fprintf(w, "    command: %s\n", strings.Join(l.Command, " "))
			}
			for _, d := range l.Data {
				fmt.Fprintf(w, "    data:    %s %s@%s  %.12s\n", d.Kind, d.Name, d.Version, d.Digest)
			}
			if c := l.Code; c != nil {
				fmt.Fprintf(w, "    code:    %s@%s  %.12s\n", c.Name, c.Version, c.Digest)
			}
			if len(l.Metrics) > 0 {
				var ms []string
				for _, k := range slices.Sorted(maps.Keys(l.Metrics)) {
					ms = append(ms, fmt.Sprintf("%s=%.4g", k, l.Metrics[k]))
				}
				fmt.Fprintf(w, "    metrics: %s\n", strings.Join(ms, " "))
			}
			if l.RetrainOf != "" {
				why := ""
				if t := l.Trigger; t != nil {
					why = fmt.Sprintf(" after drift at %s/%s on version %s: %s %s=%.4g after %d samples", t.Site, t.Node, t.Version, t.Detector, t.Feature, t.Statistic, t.Samples)
				}
				fmt.Fprintf(w, "    retrain of InferenceService/%s%s\n", l.RetrainOf, why)
			}
		}
		for _, s := range st.Served {
			fmt.Fprintf(w, "  served by %s on %s (%s): %s\n", s.Policy, s.Node, s.Site, s.State)
		}
		for _, ch := range st.Children {
			fmt.Fprintf(w, "  retrained into %s@%s\n", ch.Name, ch.Version)
		}
	}
}

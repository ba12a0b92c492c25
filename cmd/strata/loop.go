package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

func runDrift(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("drift", "[MODEL] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	model := ""
	if len(pos) > 1 {
		fs.Usage()
		return &exitError{code: 1, err: errors.New("strata drift takes at most one MODEL")}
	} else if len(pos) == 1 {
		model = pos[0]
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	recs, err := c.client().Drift(ctx, model, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	if len(recs) == 0 {
		fmt.Fprintln(stdout, "no drift monitors (a served InferenceService with drift: starts one per node)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tSITE\tNODE\tDETECTOR\tSEEN\tSTATE\tWORST FEATURE\tSCORE\tTHRESHOLD\tHISTORY")
	for _, d := range recs {
		state := "ok"
		switch {
		case d.Error != "":
			state = "error: " + d.Error
		case !d.Ready:
			state = fmt.Sprintf("collecting reference (%d/%d)", d.Seen, d.Window)
		case d.Alarmed:
			state = fmt.Sprintf("DRIFT (at %d)", d.AlarmSeen)
		case d.Status() == "warming" && d.Seen < int64(d.Window):
			state = fmt.Sprintf("warming (%d/%d)", d.Seen, d.Window)
		case d.Status() == "warming":
			// Evaluations over the threshold, not yet enough for an alarm.
			state = "warming (drifted, not yet an alarm)"
		}
		if d.Invalid > 0 {
			state += fmt.Sprintf(", %d invalid rows dropped", d.Invalid)
		}
		switch c := d.Capture; {
		case c == nil:
		case c.Error != "":
			state += ", capture failed: " + c.Error
		case c.Dataset != "":
			state += ", captured " + c.Dataset
		default:
			state += fmt.Sprintf(", capturing %d/%d rows", c.Rows, c.Want)
		}
		if d.ReferenceSite != "" {
			state += ", " + d.ReferenceSite + "'s reference"
		}
		feat, score := "-", "-"
		if n := len(d.History); n > 0 {
			feat, score = d.History[n-1].Feature, fmt.Sprintf("%.4g", d.History[n-1].Statistic)
		}
		fmt.Fprintf(tw, "%s@%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.4g\t%s\n", d.Model, d.Version, d.Site, d.Node, d.Detector, d.Seen, state, feat, score, d.Threshold, sparkline(d))
	}
	return tw.Flush()
}

// sparkline draws the worst score of recent evaluations, one rune each,
// scaled to the threshold (the top rune is at or past it).
func sparkline(d api.Drift) string {
	if len(d.History) == 0 || d.Threshold <= 0 {
		return "-"
	}
	bars := []rune("▁▂▃▄▅▆▇█")
	var b strings.Builder
	for _, p := range d.History {
		f := p.Statistic / d.Threshold
		if d.Detector == "ks" { // p-values: smaller is worse
			f = 1
			if p.Statistic > 0 {
				f = min(1, d.Threshold/p.Statistic)
			}
		}
		i := int(f * float64(len(bars)-1))
		b.WriteRune(bars[max(0, min(len(bars)-1, i))])
	}
	return b.String()
}

func runJobs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("jobs", "[-o json|yaml]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	jobs, err := c.client().Jobs(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(stdout, "no training jobs")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tATTEMPT\tLAUNCHER\tNODES\tDURATION\tMODEL\tMESSAGE")
	for _, j := range jobs {
		dur := "-"
		if !j.Started.IsZero() {
			end := j.Finished
			if end.IsZero() {
				end = time.Now()
			}
			dur = end.Sub(j.Started).Round(100 * time.Millisecond).String()
		}
		model := "-"
		if j.Version != "" {
			model = fmt.Sprintf("%s@%s", j.Model, j.Version)
		}
		msg := j.Error
		if msg == "" && j.RetrainOf != "" {
			msg = "retrains " + j.RetrainOf
		}
		attempt := "-"
		if j.Attempt > 0 {
			attempt = fmt.Sprint(j.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.State, attempt, j.Launcher, strings.Join(j.Nodes, ","), dur, model, dash(msg))
	}
	return tw.Flush()
}

func runLogs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("logs", "JOB [-rank N] [-f]", stderr)
	c := addClientFlags(fs)
	rank := fs.Int("rank", 0, "the gang member (rank) whose output to show")
	follow := fs.Bool("f", false, "follow: print new output as the job writes it, until it ends")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: errors.New("JOB is required (see strata jobs)")}
	}
	cl := c.client()
	printed := 0
	for {
		// Whether the job had ended is read before its output, so the
		// last read has everything it wrote.
		ended := true
		if *follow {
			ctx, cancel := readCtx()
			j, err := cl.Job(ctx, pos[0])
			cancel()
			if err != nil {
				return c.explain(err)
			}
			ended = j.Terminal()
		}
		ctx, cancel := readCtx()
		logs, err := cl.JobLogs(ctx, pos[0], *rank)
		cancel()
		if err != nil && !(*follow && !ended) {
			return c.explain(err)
		}
		if err == nil {
			if len(logs) < printed {
				printed = 0 // a new attempt started its output afresh
			}
			if _, err := io.WriteString(stdout, logs[printed:]); err != nil {
				return err
			}
			printed = len(logs)
		}
		if ended {
			return nil
		}
		time.Sleep(time.Second)
	}
}

func write(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}

func runEvents(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events", "[-since SEQ] [-follow=false] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	since := fs.Int64("since", -1, "replay the kept events after this sequence number (0: all kept)")
	follow := fs.Bool("follow", true, "keep printing events as they happen; -follow=false prints the kept ones (after -since, default all) and exits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	show := newEventPrinter(stdout, time.Local)
	read := followEvents
	if !*follow {
		read = keptEvents
	}
	return c.explain(read(context.Background(), c.client(), *since, func(ev api.Event, raw []byte) bool {
		if c.structured() {
			if err := c.emitStreamed(stdout, raw); err != nil {
				return false
			}
		} else {
			show(ev)
		}
		return true
	}))
}

// newEventPrinter returns a function that prints events one a line, for
// people. An event that happened several times in a row is one line with
// its count (×12) and the time of the first; while following, a repeat
// of an event already printed comes as an update (api.Event.Replaces),
// and is printed again only when its count doubles (2, 4, 8, ...), so a
// retry failing every few seconds does not fill the screen.
func newEventPrinter(w io.Writer, loc *time.Location) func(api.Event) {
	shown := map[uint64]bool{} // the Seq of each event printed, as it is now
	return func(ev api.Event) {
		n := ev.Times()
		if shown[ev.Replaces] && ev.Replaces != 0 {
			delete(shown, ev.Replaces)
			shown[ev.Seq] = true
			if n&(n-1) != 0 {
				return
			}
		}
		shown[ev.Seq] = true
		line := fmt.Sprintf("%s  %-20s %s", ev.Time.In(loc).Format("15:04:05.000"), ev.Type, ev.Message)
		if n > 1 {
			line += fmt.Sprintf(" ×%d since %s", n, ev.First.In(loc).Format("15:04:05"))
		}
		fmt.Fprintln(w, line)
	}
}

// followEvents reads an agent's event stream from since (see
// client.Events) until fn returns false or the stream ends.
func followEvents(ctx context.Context, c *client.Client, since int64, fn func(ev api.Event, raw []byte) bool) error {
	s, err := c.Events(ctx, since)
	if err != nil {
		return err
	}
	return readEvents(s, fn)
}

// keptEvents reads the events an agent kept after since (all for a
// since below 1) and returns at their end (see client.KeptEvents).
func keptEvents(ctx context.Context, c *client.Client, since int64, fn func(ev api.Event, raw []byte) bool) error {
	s, err := c.KeptEvents(ctx, since)
	if err != nil {
		return err
	}
	return readEvents(s, fn)
}

func readEvents(s *client.EventStream, fn func(ev api.Event, raw []byte) bool) error {
	defer s.Close()
	for s.Next() {
		if !fn(s.Event(), s.Raw()) {
			return nil
		}
	}
	return s.Err()
}

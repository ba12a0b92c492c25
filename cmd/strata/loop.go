package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/agent"
)

func runDrift(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("drift", "[MODEL] [-o json]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	path := "/v1/drift"
	if len(pos) > 1 {
		fs.Usage()
		return &exitError{code: 1, err: errors.New("strata drift takes at most one MODEL")}
	} else if len(pos) == 1 {
		path += "?model=" + url.QueryEscape(pos[0])
	}
	var recs []agent.DriftRecord
	var raw []byte
	if err := c.get(path, &recs, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
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
func sparkline(d agent.DriftRecord) string {
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
	fs := newFlags("jobs", "[-o json]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	var jobs []agent.JobRecord
	var raw []byte
	if err := c.get("/v1/jobs", &jobs, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	if len(jobs) == 0 {
		fmt.Fprintln(stdout, "no training jobs")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tLAUNCHER\tNODES\tDURATION\tMODEL\tMESSAGE")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.State, j.Launcher, strings.Join(j.Nodes, ","), dur, model, dash(msg))
	}
	return tw.Flush()
}

func runLogs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("logs", "JOB [-rank N]", stderr)
	c := addClientFlags(fs)
	rank := fs.Int("rank", 0, "the gang member (rank) whose output to show")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: errors.New("JOB is required (see strata jobs)")}
	}
	var raw []byte
	return errors.Join(c.get(fmt.Sprintf("/v1/jobs/%s/logs?rank=%d", url.PathEscape(pos[0]), *rank), nil, &raw), write(stdout, raw))
}

func write(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}

func runEvents(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events", "[-since SEQ] [-o json]", stderr)
	c := addClientFlags(fs)
	since := fs.Int64("since", -1, "replay the kept events after this sequence number (0: all kept)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	path := "/v1/events"
	if *since >= 0 {
		path += fmt.Sprintf("?since=%d", *since)
	}
	return followEvents(context.Background(), c.address, path, func(ev agent.Event, raw string) bool {
		if c.output == "json" {
			fmt.Fprintln(stdout, raw)
		} else {
			fmt.Fprintf(stdout, "%s  %-20s %s\n", ev.Time.Local().Format("15:04:05.000"), ev.Type, ev.Message)
		}
		return true
	})
}

// followEvents reads an agent's event stream until fn returns false or the
// stream ends.
func followEvents(ctx context.Context, address, path string, fn func(ev agent.Event, raw string) bool) error {
	base := address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return err
	}
	if tok := os.Getenv("STRATA_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the agent at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev agent.Event
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if !fn(ev, data) {
			return nil
		}
	}
	return sc.Err()
}

package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// serveColour is each serving strategy's colour.
var serveColour = map[string]string{
	ServeFixed: "#9ca3af", ServeAutoscale: "#f59e0b", ServeBurst: "#10b981", ServePrestage: "#2563eb",
}

// WriteServeSVG draws the serving report's strategies side by side: SLO
// attainment, replica-hours, median and p99 time to recover, and model
// bytes moved (pre-staging's included), one bar chart each.
func WriteServeSVG(w io.Writer, rep *ServeReport) error {
	panels := []panel[ServeResult]{
		{"SLO attainment", "%", func(r ServeResult) float64 { return 100 * r.SLOAttainment }},
		{"Replica-hours", "h", func(r ServeResult) float64 { return r.ReplicaHours }},
		{"Recovery p50", "s", func(r ServeResult) float64 { return r.RecoveryP50.Seconds() }},
		{"Recovery p99", "s", func(r ServeResult) float64 { return r.RecoveryP99.Seconds() }},
		{"Model bytes moved", "TB", func(r ServeResult) float64 { return float64(r.MovedBytes+r.PrestagedBytes) / 1e12 }},
	}
	title := fmt.Sprintf("strata sim: %s load over %d nodes, %d sites, %d services, %s; %d node and %d site failures",
		rep.Shape, rep.Nodes, rep.Sites, rep.Services, time.Duration(rep.Steps)*rep.Step, rep.NodeFailures, rep.SiteFailures)
	return writeBars(w, title, panels, rep.Results, func(r ServeResult) string { return r.Strategy }, serveColour)
}

// WriteReplicasSVG draws the serving report over time: the demand, the
// replicas each strategy held, and each strategy's SLO attainment per
// step, one line chart each, sharing the time axis.
func WriteReplicasSVG(w io.Writer, rep *ServeReport) error {
	type chart struct {
		title string
		lines map[string][]float64
		order []string
		hi    float64
	}
	demand := chart{title: "Demand (requests/s, all client sites)", lines: map[string][]float64{"demand": rep.Demand}, order: []string{"demand"}}
	replicas := chart{title: "Replicas held", lines: map[string][]float64{}}
	attain := chart{title: "SLO attainment per step (%)", lines: map[string][]float64{}, hi: 100}
	for _, r := range rep.Results {
		var n, a []float64
		for _, v := range r.Replicas {
			n = append(n, float64(v))
		}
		for _, v := range r.Attainment {
			a = append(a, 100*v)
		}
		replicas.lines[r.Strategy], attain.lines[r.Strategy] = n, a
		replicas.order, attain.order = append(replicas.order, r.Strategy), append(attain.order, r.Strategy)
	}
	charts := []chart{demand, replicas, attain}
	const W, ch, left, top, gap = 900.0, 200.0, 70.0, 50.0, 60.0
	H := top + float64(len(charts))*(ch+gap) + 20
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(b, `<text x="16" y="24" font-size="16" font-weight="600">strata sim: %s load over time (UTC), %d steps of %s</text>`+"\n", html.EscapeString(rep.Shape), rep.Steps, rep.Step)
	lx := left
	for _, r := range rep.Results {
		fmt.Fprintf(b, `<rect x="%.0f" y="32" width="12" height="4" fill="%s"/><text x="%.0f" y="38">%s</text>`+"\n", lx, serveColour[r.Strategy], lx+16, html.EscapeString(r.Strategy))
		lx += 30 + 7*float64(len(r.Strategy))
	}
	steps := max(1, rep.Steps)
	xOf := func(k int) float64 { return left + (W-left-20)*float64(k)/float64(steps) }
	for c, cht := range charts {
		y0 := top + float64(c)*(ch+gap) + 20
		hi := cht.hi
		if hi == 0 {
			for _, vs := range cht.lines {
				for _, v := range vs {
					hi = math.Max(hi, v)
				}
			}
		}
		if hi <= 0 {
			hi = 1
		}
		yOf := func(v float64) float64 { return y0 + ch - ch*v/hi }
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="600">%s</text>`+"\n", left, y0-6, html.EscapeString(cht.title))
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", left, y0+ch, W-20, y0+ch)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", left, y0, left, y0+ch)
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end" font-size="10">%s</text>`+"\n", left-4, y0+4, short(hi))
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end" font-size="10">0</text>`+"\n", left-4, y0+ch+4)
		hours := int((time.Duration(rep.Steps) * rep.Step).Hours())
		for h := 0; h <= hours; h += max(1, hours/8) {
			k := int(time.Duration(h) * time.Hour / max(rep.Step, 1))
			fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" font-size="10">%dh</text>`+"\n", xOf(k), y0+ch+14, h)
		}
		for _, name := range cht.order {
			vs := cht.lines[name]
			var pts strings.Builder
			for k, v := range vs {
				fmt.Fprintf(&pts, "%.1f,%.1f ", xOf(k), yOf(v))
			}
			colour := serveColour[name]
			if colour == "" {
				colour = "#111"
			}
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>`+"\n", colour, strings.TrimSpace(pts.String()), html.EscapeString(name))
		}
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

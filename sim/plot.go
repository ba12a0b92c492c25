package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
)

// Colours per strategy (in Strategies order) and per tier.
var (
	strategyColour = map[string]string{
		StrategyStrata: "#2563eb", StrategyCloudOnly: "#9333ea", StrategyRandom: "#9ca3af",
		StrategyLeastLoaded: "#f59e0b", StrategyNearestSite: "#10b981",
	}
	tierColour = map[string]string{placement.TierEdge: "#10b981", placement.TierOnprem: "#2563eb", placement.TierCloud: "#9333ea"}
)

// panel is one bar chart of a strategies plot.
type panel[R any] struct {
	title string
	unit  string
	value func(R) float64
}

// WriteStrategiesSVG draws the report's strategies side by side: SLO
// attainment, cross-site bytes, GPU fragmentation and median decision
// time, one bar chart each.
func WriteStrategiesSVG(w io.Writer, rep *Report) error {
	panels := []panel[Result]{
		{"SLO attainment", "%", func(r Result) float64 { return 100 * r.SLOAttainment }},
		{"Cross-site bytes", "TB", func(r Result) float64 { return float64(r.EgressBytes) / 1e12 }},
		{"GPU fragmentation", "%", func(r Result) float64 { return 100 * r.GPUFragmentation }},
		{"Decision time p50", "ms", func(r Result) float64 { return r.DecisionP50.Seconds() * 1e3 }},
	}
	title := fmt.Sprintf("strata sim: %d nodes, %d sites, %d events", rep.Nodes, rep.Sites, rep.Events)
	return writeBars(w, title, panels, rep.Results, func(r Result) string { return r.Strategy }, strategyColour)
}

// writeBars draws one bar chart per panel, a bar per result in each.
func writeBars[R any](w io.Writer, title string, panels []panel[R], results []R, name func(R) string, colour map[string]string) error {
	const pw, ph, top, bottom = 260.0, 260.0, 56.0, 70.0
	width, height := pw*float64(len(panels))+20, ph+top+bottom
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(b, `<text x="16" y="24" font-size="16" font-weight="600">%s</text>`+"\n", html.EscapeString(title))
	n := float64(len(results))
	for k, p := range panels {
		x0 := 20 + pw*float64(k)
		top := top + 10
		hi := 0.0
		for _, r := range results {
			hi = math.Max(hi, p.value(r))
		}
		if hi <= 0 {
			hi = 1
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-weight="600">%s (%s)</text>`+"\n", x0, top-8, html.EscapeString(p.title), p.unit)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`+"\n", x0, top+ph-20, x0+pw-30, top+ph-20)
		bw := (pw - 40) / n
		for j, r := range results {
			v := p.value(r)
			h := (ph - 40) * v / hi
			x := x0 + 5 + bw*float64(j)
			y := top + ph - 20 - h
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %.3g %s</title></rect>`+"\n",
				x, y, bw*0.8, h, colour[name(r)], html.EscapeString(name(r)), v, p.unit)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+bw*0.4, y-3, short(v))
			fmt.Fprintf(b, `<text transform="translate(%.1f,%.1f) rotate(35)" font-size="10">%s</text>`+"\n", x+bw*0.2, top+ph-8, html.EscapeString(name(r)))
		}
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

func short(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

// WriteMapSVG draws the topology's sites at their network coordinates
// (milliseconds apart), coloured by tier, each circle's area growing with
// the replicas and gang members res placed there.
func WriteMapSVG(w io.Writer, t *Topology, res Result) error {
	type site struct {
		x, y float64
		name string
		tier string
		n    int
	}
	var sites []site
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, s := range t.Sites {
		var cs []*coordinate.Coordinate
		for _, i := range s.Nodes {
			if c := t.Nodes[i].Coord; c != nil {
				cs = append(cs, c)
			}
		}
		if len(cs) == 0 {
			continue
		}
		c := placement.ClientCoordinate(cs)
		x, y := c.Vec[0]*1e3, c.Vec[1]*1e3
		sites = append(sites, site{x, y, s.Name, s.Tier, res.SiteReplicas[s.Name]})
		minX, minY, maxX, maxY = math.Min(minX, x), math.Min(minY, y), math.Max(maxX, x), math.Max(maxY, y)
	}
	const W, H, pad = 900.0, 600.0, 40.0
	sx := (W - 2*pad) / math.Max(maxX-minX, 1e-9)
	sy := (H - 2*pad - 30) / math.Max(maxY-minY, 1e-9)
	scale := math.Min(sx, sy)
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(b, `<text x="16" y="24" font-size="16" font-weight="600">%s: placements by site (network coordinates, %.0f ms across)</text>`+"\n", html.EscapeString(res.Strategy), maxX-minX)
	lx := W - 260.0
	for k, tier := range []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud} {
		fmt.Fprintf(b, `<circle cx="%.0f" cy="%.0f" r="5" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx+float64(k)*80, 20.0, tierColour[tier], lx+float64(k)*80+8, 24.0, tier)
	}
	for _, s := range sites {
		x := pad + (s.x-minX)*scale
		y := pad + 30 + (s.y-minY)*scale
		r, op := 1.5, 0.35
		if s.n > 0 {
			r, op = 2+2*math.Sqrt(float64(s.n)), 0.6
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" fill-opacity="%.2f"><title>%s (%s): %d placed</title></circle>`+"\n",
			x, y, r, tierColour[s.tier], op, html.EscapeString(s.name), s.tier, s.n)
		if len(sites) <= 40 { // few enough sites to name them
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#333">%s (%d)</text>`+"\n", x+r+4, y+4, html.EscapeString(s.name), s.n)
		}
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

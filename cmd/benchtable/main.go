// Command benchtable reads `go test -bench` output on standard input and
// prints the figures as tables, one per benchmark group, with the ratio of
// every figure to the strata row of its group (or its first row when it has
// no strata row).
//
// A group is everything in a benchmark's name before "/impl="; the row is
// the impl's name. Metrics are the (value, unit) pairs a benchmark reports;
// a zero ns/op (hidden by the benchmark) is left out.
//
//	go test -run '^$' -bench . -benchtime 1x ./... | go run ./cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

type row struct {
	impl    string
	metrics map[string]float64
}

type group struct {
	name  string
	units []string
	rows  []*row
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader) []*group {
	var groups []*group
	byName := map[string]*group{}
	pkg := ""
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		gname, impl := name, "-"
		if i := strings.Index(name, "/impl="); i >= 0 {
			gname, impl = name[:i], name[i+len("/impl="):]
			if j := strings.Index(impl, "/"); j >= 0 {
				gname += impl[j:]
				impl = impl[:j]
			}
		}
		if short := pkg[strings.LastIndex(pkg, "/")+1:]; short != "" {
			gname = short + ": " + gname
		}
		g := byName[gname]
		if g == nil {
			g = &group{name: gname}
			byName[gname] = g
			groups = append(groups, g)
		}
		rw := &row{impl: impl, metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			unit := f[i+1]
			if unit == "ns/op" && v == 0 {
				continue
			}
			if _, seen := rw.metrics[unit]; !seen {
				known := false
				for _, u := range g.units {
					known = known || u == unit
				}
				if !known {
					g.units = append(g.units, unit)
				}
			}
			rw.metrics[unit] = v
		}
		g.rows = append(g.rows, rw)
	}
	return groups
}

func format(v float64) string {
	switch a := abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func print(w io.Writer, groups []*group) {
	for _, g := range groups {
		var base *row
		for _, r := range g.rows {
			if r.impl == "strata" {
				base = r
			}
		}
		if base == nil && len(g.rows) > 1 {
			base = g.rows[0] // no strata row: ratios to the first
		}
		fmt.Fprintf(w, "\n%s\n", g.name)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "impl\t")
		for _, u := range g.units {
			fmt.Fprintf(tw, "%s\t", u)
		}
		fmt.Fprintln(tw)
		for _, r := range g.rows {
			fmt.Fprintf(tw, "%s\t", r.impl)
			for _, u := range g.units {
				v, ok := r.metrics[u]
				if !ok {
					fmt.Fprint(tw, "-\t")
					continue
				}
				cell := format(v)
				if base != nil && r != base {
					if b, ok := base.metrics[u]; ok && b != 0 {
						cell += fmt.Sprintf(" (%s×)", format(v/b))
					}
				}
				fmt.Fprintf(tw, "%s\t", cell)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	if len(groups) > 0 {
		fmt.Fprintln(w, "\n(×) = this row's figure divided by the strata row's figure in the same group (the first row's where there is none).")
	}
}

func main() {
	groups := parse(os.Stdin)
	if len(groups) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark lines on standard input")
		os.Exit(1)
	}
	print(os.Stdout, groups)
}

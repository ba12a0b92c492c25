package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseAndPrint(t *testing.T) {
	in := `goos: linux
pkg: github.com/strata-mesh/strata/mesh
BenchmarkConvergence/nodes=16/impl=strata-2   1   0 ns/op   0.5 median-s   0.6 max-s
BenchmarkConvergence/nodes=16/impl=gossip-theory-2   1   0 ns/op   1.0 median-s   1.2 max-s
BenchmarkPlain-2   100   2500 ns/op
PASS
`
	groups := parse(strings.NewReader(in))
	if len(groups) != 2 {
		t.Fatalf("got %d groups, want 2", len(groups))
	}
	g := groups[0]
	if g.name != "mesh: BenchmarkConvergence/nodes=16" || len(g.rows) != 2 || g.rows[1].impl != "gossip-theory" {
		t.Fatalf("group = %+v", g)
	}
	if strings.Join(g.units, ",") != "median-s,max-s" {
		t.Errorf("units = %v (zero ns/op must be hidden)", g.units)
	}
	var out bytes.Buffer
	print(&out, groups)
	if !strings.Contains(out.String(), "1.000 (2.000×)") {
		t.Errorf("ratio to strata missing:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "2500") {
		t.Errorf("plain benchmark missing:\n%s", out.String())
	}
}

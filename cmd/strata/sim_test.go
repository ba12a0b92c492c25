package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/sim"
)

// TestSimPlotsOnlyWhenAsked runs a small simulation twice: without
// -plots nothing is written to the working directory, with -plots DIR
// both SVGs land in DIR.
func TestSimPlotsOnlyWhenAsked(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd) // the old default wrote into the working directory
	small := []string{"-nodes", "300", "-policies", "20", "-strategies", "strata", "-o", "json"}
	if err := runSim(small, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(cwd); len(ents) > 0 {
		t.Errorf("sim without -plots wrote %s", ents[0].Name())
	}
	dir := filepath.Join(t.TempDir(), "plots")
	if err := runSim(append(small, "-plots", dir), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if want := []string{"strata-sim-map.svg", "strata-sim-strategies.svg"}; !slices.Equal(got, want) {
		t.Errorf("-plots wrote %v, want %v", got, want)
	}
}

// TestSimLoad runs a small serving-load simulation: the JSON report has a
// result per serving strategy, -plots writes the two serving plots, and
// the load flags are refused without -load.
func TestSimLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out strings.Builder
	args := []string{"-nodes", "400", "-sites", "20", "-load", "diurnal", "-hours", "6", "-step", "10m", "-plots", dir, "-o", "json"}
	if err := runSim(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep sim.ServeReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Strategy)
	}
	if !slices.Equal(got, sim.ServeStrategies) || rep.Steps != 36 {
		t.Errorf("strategies %v, %d steps; want %v, 36", got, rep.Steps, sim.ServeStrategies)
	}
	for _, name := range []string{"strata-sim-serve.svg", "strata-sim-replicas.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	out.Reset()
	if err := runSim([]string{"-nodes", "400", "-sites", "20", "-load", "diurnal", "-hours", "2", "-strategies", "fixed,autoscale"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SLO MET") || strings.Contains(out.String(), sim.ServeBurst) {
		t.Errorf("table for fixed,autoscale:\n%s", out.String())
	}
	for _, bad := range [][]string{{"-hours", "3"}, {"-load", "tidal"}, {"-load", "diurnal", "-policies", "5"}} {
		if err := runSim(append([]string{"-nodes", "200"}, bad...), io.Discard, io.Discard); err == nil {
			t.Errorf("sim %v: no error", bad)
		}
	}
}

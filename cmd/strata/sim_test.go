package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
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

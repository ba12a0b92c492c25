package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkGolden compares got with testdata/NAME.golden (-update rewrites
// it).
func checkGolden(tb testing.TB, name, got string) {
	tb.Helper()
	golden := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		tb.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		tb.Errorf("%s output (-golden +got):\n%s", name, diff)
	}
}

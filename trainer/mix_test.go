package trainer

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/infer/drift"
)

// writeRows writes n rows of loopish data (feature a shifted by shift) as
// a CSV with the given column order.
func writeRows(t *testing.T, path string, n int, shift float64, seed uint64, cols ...string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	ds := NewDataset([]string{"a", "b"}, "y")
	for range n {
		a, b := r.NormFloat64()+shift, r.NormFloat64()
		y := 0
		if a-shift+b > 0 {
			y = 1
		}
		if err := ds.Add([]float64{a, b}, y); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := ds.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if len(cols) > 0 {
		// Reorder the columns a,b,y as cols names them.
		var lines []string
		for line := range strings.Lines(out) {
			f := strings.Split(strings.TrimSpace(line), ",")
			m := map[string]string{"a": f[0], "b": f[1], "y": f[2]}
			var o []string
			for _, c := range cols {
				o = append(o, m[c])
			}
			lines = append(lines, strings.Join(o, ","))
		}
		out = strings.Join(lines, "\n") + "\n"
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMixedData trains on a base file and a site's captured rows mixed
// half and half: the captured rows are resampled to make up half the
// training rows, the default reference summarises the base file's rows
// and the site's reference its own distinct rows.
func TestMixedData(t *testing.T) {
	dir := t.TempDir()
	base, capt := filepath.Join(dir, "cases.csv"), filepath.Join(dir, "capture.csv")
	writeRows(t, base, 1000, 0, 1)
	writeRows(t, capt, 40, 3, 2, "y", "b", "a") // another column order
	files := []DataFile{{Path: base}, {Path: capt, Mix: 0.5, Site: "edge-a"}}
	ds, spans, err := readData(files, "y", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Rows() != 2000 || !slices.Equal(ds.Features, []string{"a", "b"}) {
		t.Fatalf("mixed dataset: %d rows of %v; want 2000 rows of a, b", ds.Rows(), ds.Features)
	}
	if want := []span{{"", 0, 1000}, {"edge-a", 1000, 1040}}; !slices.Equal(spans, want) {
		t.Errorf("spans = %v, want %v", spans, want)
	}
	again, _, _ := readData(files, "y", 1)
	if !slices.Equal(ds.X, again.X) {
		t.Error("the same files and seed gave other rows")
	}
	res, err := Train(context.Background(), ds, Config{Kind: KindLogistic, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sites, err := siteReferences(res, ds, spans, drift.SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	def, site := res.Reference.Features[0], sites["edge-a"].Features[0]
	if def.Count != 1000 || def.Mean > 0.5 || site.Count != 40 || site.Mean < 2.5 || len(sites) != 1 {
		t.Errorf("references: default a = %d rows, mean %.2f; edge-a's a = %d rows, mean %.2f; want 1000 rows near 0 and 40 distinct rows near 3",
			def.Count, def.Mean, site.Count, site.Mean)
	}
	if p, q := res.Reference.Prediction, sites["edge-a"].Prediction; p == nil || p.Count != 1000 || q == nil || q.Count != 40 {
		t.Errorf("prediction references: default %+v, edge-a %+v; want the score on 1000 and on 40 rows", p, q)
	}

	// Fewer rows wanted than the file holds: sampled without copies.
	writeRows(t, capt, 100, 3, 2)
	files[1].Mix = 0.05
	ds, spans, err = readData(files, "y", 1)
	if err != nil || ds.Rows() != 1053 || spans[1] != (span{"edge-a", 1000, 1053}) {
		t.Errorf("mix 0.05: %v rows, spans %v, %v; want 1000 + 53", ds.Rows(), spans, err)
	}

	// A file with other columns is refused, naming it.
	other := filepath.Join(dir, "other.csv")
	if err := os.WriteFile(other, []byte("a,c,y\n1,2,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = readData([]DataFile{{Path: base}, {Path: other, Mix: 0.5}}, "y", 1)
	if !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), `other.csv: no column "b"`) {
		t.Errorf("other columns: %v", err)
	}
}

package trainer

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/strata-mesh/strata/infer/drift"
)

// SiteReferencesFile holds the drift references of the sites whose own
// rows a built-in job trained on (map[site]drift.Reference as JSON).
const SiteReferencesFile = "site-references.json"

// DataFile is one CSV file a built-in job trains on.
type DataFile struct {
	// Path is the file.
	Path string `json:"path"`
	// Mix is the fraction of the training rows drawn from this file, its
	// rows resampled (seeded) to make it up; 0 takes its rows as they
	// are.
	Mix float64 `json:"mix,omitempty"`
	// Site marks the rows as one site's own live data: the model's drift
	// reference for that site summarises them alone, and the default
	// reference the rows of files without a site.
	Site string `json:"site,omitempty"`
}

// span is the rows of one file in a mixed dataset that are not resampled
// copies: a reference summarises each row once, as its count matters.
type span struct {
	site   string
	lo, hi int
}

// readData reads files, which must have the same columns (in any order),
// into one dataset: the rows of files without Mix as they are, then each
// mixed file's rows drawn to make up its fraction of the whole (sampled
// without replacement when it holds more, every row and then copies when
// fewer). It also returns where each file's distinct rows lie.
func readData(files []DataFile, label string, seed int64) (*Dataset, []span, error) {
	type part struct {
		f    DataFile
		rows [][]string
	}
	var header []string
	var parts []part
	base, mix := 0, 0.0
	for _, f := range files {
		hdr, rows, err := readRecords(f.Path)
		if err != nil {
			return nil, nil, err
		}
		if header == nil {
			header = hdr
		} else if rows, err = reorder(header, hdr, rows); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrDataset, f.Path, err)
		}
		parts = append(parts, part{f, rows})
		if f.Mix > 0 {
			mix += f.Mix
		} else {
			base += len(rows)
		}
	}
	if mix >= 1 {
		return nil, nil, fmt.Errorf("%w: the files' mix adds up to %g, want below 1", ErrDataset, mix)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xda7a))
	var out bytes.Buffer
	w := csv.NewWriter(&out)
	_ = w.Write(header)
	var spans []span
	n := 0
	for _, p := range parts {
		rows := p.rows
		distinct := len(rows)
		if p.f.Mix > 0 && base > 0 && len(rows) > 0 {
			want := int(math.Round(p.f.Mix / (1 - mix) * float64(base)))
			if want <= len(rows) {
				perm := rng.Perm(len(rows))[:want]
				slices.Sort(perm)
				rows = make([][]string, 0, want)
				for _, i := range perm {
					rows = append(rows, p.rows[i])
				}
				distinct = want
			} else {
				rows = slices.Clone(rows)
				for len(rows) < want {
					rows = append(rows, p.rows[rng.IntN(len(p.rows))])
				}
			}
		}
		spans = append(spans, span{site: p.f.Site, lo: n, hi: n + distinct})
		n += len(rows)
		_ = w.WriteAll(rows)
	}
	if err := w.Error(); err != nil {
		return nil, nil, err
	}
	ds, err := ReadCSV(&out, label)
	if err != nil {
		return nil, nil, err
	}
	return ds, spans, nil
}

// readRecords reads a CSV file's header and rows.
func readRecords(path string) ([]string, [][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, nil, fmt.Errorf("%w: %s: empty file, want a header row", ErrDataset, path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrDataset, path, err)
	}
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrDataset, path, err)
	}
	return header, rows, nil
}

// reorder puts rows written under hdr in the column order of want.
func reorder(want, hdr []string, rows [][]string) ([][]string, error) {
	if slices.Equal(want, hdr) {
		return rows, nil
	}
	idx := make([]int, len(want))
	for i, c := range want {
		idx[i] = slices.Index(hdr, c)
		if idx[i] < 0 {
			return nil, fmt.Errorf("no column %q (columns: %s; want those of the first file: %s)", c, strings.Join(hdr, ", "), strings.Join(want, ", "))
		}
	}
	if len(hdr) != len(want) {
		return nil, fmt.Errorf("columns %s, want those of the first file: %s", strings.Join(hdr, ", "), strings.Join(want, ", "))
	}
	out := make([][]string, len(rows))
	for r, row := range rows {
		if len(row) != len(hdr) {
			return nil, fmt.Errorf("row %d has %d values, want %d", r+1, len(row), len(hdr))
		}
		o := make([]string, len(want))
		for i, j := range idx {
			o[i] = row[j]
		}
		out[r] = o
	}
	return out, nil
}

// siteReferences replaces res.Reference, when any file has a site, with
// the summary of the rows of files without one, and returns the summary
// of each site's rows: each site's monitors then compare its traffic with
// its own data, and the other sites' with theirs. Nil when no file has a
// site.
func siteReferences(res *Result, ds *Dataset, spans []span, opts drift.SummaryOptions) (map[string]drift.Reference, error) {
	if !slices.ContainsFunc(spans, func(s span) bool { return s.site != "" }) {
		return nil, nil
	}
	bySite := map[string][]span{}
	for _, s := range spans {
		bySite[s.site] = append(bySite[s.site], s)
	}
	out := map[string]drift.Reference{}
	for site, ss := range bySite {
		ref, err := summarize(res, ds, ss, opts)
		if err != nil {
			return nil, fmt.Errorf("trainer: reference of site %q: %w", site, err)
		}
		if site == "" {
			res.Reference = ref
		} else {
			out[site] = ref
		}
	}
	return out, nil
}

// summarize is the drift reference of the rows in spans: each feature,
// and the served model's score on them, as Train's reference has it.
func summarize(res *Result, ds *Dataset, spans []span, opts drift.SummaryOptions) (drift.Reference, error) {
	f := len(ds.Features)
	var x []float64
	var rows []int
	for _, s := range spans {
		x = append(x, ds.X[s.lo*f:s.hi*f]...)
		for r := s.lo; r < s.hi; r++ {
			rows = append(rows, r)
		}
	}
	ref, err := drift.SummarizeColumns(ds.Features, x, opts)
	if err != nil {
		return ref, err
	}
	pred, err := drift.Summarize("prediction", scores(res.Layers, ds, rows), opts)
	if err != nil {
		return ref, err
	}
	ref.Prediction = &pred
	return ref, nil
}

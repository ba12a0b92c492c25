package trainer

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrDataset is returned, wrapped with the position and the cause, when a
// dataset cannot be read or used for training.
var ErrDataset = errors.New("trainer: bad dataset")

// Dataset is a tabular classification data set held in memory.
type Dataset struct {
	// Features are the feature column names, in column order.
	Features []string
	// Label is the label column's name.
	Label string
	// X is row-major [Rows][len(Features)].
	X []float64
	// Y holds each row's class, an integer 0 ≤ y < Classes.
	Y []int
	// Classes is 1 + the largest label.
	Classes int
	// ClassNames are the classes' names when the CSV's label column held
	// names rather than numbers: class i is ClassNames[i], in sorted
	// order. Nil for numbered classes.
	ClassNames []string
}

// NewDataset returns an empty dataset with the given feature columns and
// label name, to be filled with Add (for example from logged samples).
func NewDataset(features []string, label string) *Dataset {
	return &Dataset{Features: append([]string(nil), features...), Label: label}
}

// Add appends one row of len(Features) finite values with class y ≥ 0. It
// returns an error wrapping ErrDataset for a wrong width, a non-finite
// value or a negative class.
func (d *Dataset) Add(row []float64, y int) error {
	if len(row) != len(d.Features) {
		return fmt.Errorf("%w: row has %d values, want %d", ErrDataset, len(row), len(d.Features))
	}
	for j, v := range row {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s = %v is not a finite number", ErrDataset, d.Features[j], v)
		}
	}
	if y < 0 {
		return fmt.Errorf("%w: class %d must not be negative", ErrDataset, y)
	}
	d.X = append(d.X, row...)
	d.Y = append(d.Y, y)
	d.Classes = max(d.Classes, y+1)
	return nil
}

// Rows returns the number of rows.
func (d *Dataset) Rows() int { return len(d.Y) }

// ReadCSV reads a CSV with a header row. The column named label holds the
// class: either a non-negative integer in every row (0, 1, 2 or 0.0,
// 1.0…), or a name in every row (setosa, versicolor…), in which case the
// classes are the sorted distinct names (Dataset.ClassNames). An empty
// label means the last column. Every other column must be numeric. Errors
// wrap ErrDataset and name the line and column.
func ReadCSV(r io.Reader, label string) (*Dataset, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: empty file, want a header row", ErrDataset)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	header = append([]string(nil), header...)
	li := len(header) - 1
	if label != "" {
		li = -1
		for i, h := range header {
			if strings.TrimSpace(h) == label {
				li = i
			}
		}
		if li < 0 {
			return nil, fmt.Errorf("%w: no label column %q in header %v", ErrDataset, label, header)
		}
	}
	if len(header) < 2 {
		return nil, fmt.Errorf("%w: need at least one feature and a label column, got header %v", ErrDataset, header)
	}
	d := &Dataset{Label: strings.TrimSpace(header[li])}
	for i, h := range header {
		if i != li {
			d.Features = append(d.Features, strings.TrimSpace(h))
		}
	}
	// Labels are numbers or names, decided by the whole column: the
	// first of each kind is kept to say where a column mixes them.
	var names []string
	numLine, nameLine := 0, 0
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDataset, err)
		}
		line, _ := cr.FieldPos(0)
		for i, s := range rec {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if i == li {
				name := strings.TrimSpace(s)
				switch {
				case name == "":
					return nil, fmt.Errorf("%w: line %d column %d (%s): empty label", ErrDataset, line, i+1, header[i])
				case err != nil:
					if numLine > 0 {
						return nil, fmt.Errorf("%w: line %d column %d (%s): label %q is a name but line %d's is a number: use class names or numbers, not both", ErrDataset, line, i+1, header[i], s, numLine)
					}
					nameLine = cmp.Or(nameLine, line)
					names = append(names, name)
					continue
				case nameLine > 0:
					return nil, fmt.Errorf("%w: line %d column %d (%s): label %q is a number but line %d's is a name: use class names or numbers, not both", ErrDataset, line, i+1, header[i], s, nameLine)
				case v < 0 || v != math.Trunc(v) || v > 1<<16:
					return nil, fmt.Errorf("%w: line %d column %d (%s): label %q must be a class number 0, 1, 2… or a class name", ErrDataset, line, i+1, header[i], s)
				}
				numLine = cmp.Or(numLine, line)
				d.Y = append(d.Y, int(v))
				d.Classes = max(d.Classes, int(v)+1)
				continue
			}
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%w: line %d column %d (%s): %q is not a number", ErrDataset, line, i+1, header[i], s)
			}
			d.X = append(d.X, v)
		}
	}
	if names != nil {
		d.ClassNames = slices.Sorted(maps.Keys(setOf(names)))
		if len(d.ClassNames) > 1<<16 {
			return nil, fmt.Errorf("%w: %d class names: at most %d", ErrDataset, len(d.ClassNames), 1<<16)
		}
		for _, n := range names {
			y, _ := slices.BinarySearch(d.ClassNames, n)
			d.Y = append(d.Y, y)
		}
		d.Classes = len(d.ClassNames)
	}
	if len(d.Y) == 0 {
		return nil, fmt.Errorf("%w: no data rows", ErrDataset)
	}
	return d, nil
}

func setOf(ss []string) map[string]struct{} {
	m := make(map[string]struct{}, 8)
	for _, s := range ss {
		m[s] = struct{}{}
	}
	return m
}

// WriteCSV writes the dataset with a header, features then the label last,
// in the form ReadCSV reads.
func (d *Dataset) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	rec := append(append([]string(nil), d.Features...), d.Label)
	if err := cw.Write(rec); err != nil {
		return err
	}
	f := len(d.Features)
	for r, y := range d.Y {
		for j := 0; j < f; j++ {
			rec[j] = strconv.FormatFloat(d.X[r*f+j], 'g', -1, 64)
		}
		rec[f] = strconv.Itoa(y)
		if d.ClassNames != nil {
			rec[f] = d.ClassNames[y]
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// validate checks the shape the trainer relies on.
func (d *Dataset) validate() error {
	f := len(d.Features)
	switch {
	case f == 0:
		return fmt.Errorf("%w: no feature columns", ErrDataset)
	case len(d.X) != f*len(d.Y):
		return fmt.Errorf("%w: %d feature values for %d rows of %d features", ErrDataset, len(d.X), len(d.Y), f)
	case len(d.Y) < 2:
		return fmt.Errorf("%w: need at least 2 rows, got %d", ErrDataset, len(d.Y))
	}
	seen := map[int]bool{}
	for _, y := range d.Y {
		if y < 0 || y >= d.Classes {
			return fmt.Errorf("%w: label %d outside 0..%d", ErrDataset, y, d.Classes-1)
		}
		seen[y] = true
	}
	if len(seen) < 2 {
		return fmt.Errorf("%w: every row has the same label; need at least two classes", ErrDataset)
	}
	return nil
}

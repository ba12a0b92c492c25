package trainer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/trainer"
	"github.com/strata-mesh/strata/trainer/internal/orttest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// linearSet is separable by a hyperplane with a margin, on features of very
// different scales (so standardisation matters).
func linearSet(seed uint64, rows int) *trainer.Dataset {
	rng := rand.New(rand.NewPCG(seed, 2))
	d := &trainer.Dataset{Features: []string{"a", "b", "c"}, Label: "y", Classes: 2}
	for len(d.Y) < rows {
		a, b, c := rng.NormFloat64()*100+50, rng.NormFloat64()*0.01, rng.NormFloat64()
		s := (a-50)/100 + 2*b/0.01 - c
		if math.Abs(s) < 0.2 {
			continue
		}
		y := 0
		if s > 0 {
			y = 1
		}
		d.X = append(d.X, a, b, c)
		d.Y = append(d.Y, y)
	}
	return d
}

// ringSet has three classes by radius: not linearly separable.
func ringSet(seed uint64, rows int) *trainer.Dataset {
	rng := rand.New(rand.NewPCG(seed, 3))
	d := &trainer.Dataset{Features: []string{"x", "y"}, Label: "ring", Classes: 3}
	for len(d.Y) < rows {
		x, y := rng.Float64()*6-3, rng.Float64()*6-3
		r := math.Hypot(x, y)
		var c int
		switch {
		case r < 0.9:
			c = 0
		case r > 1.1 && r < 1.9:
			c = 1
		case r > 2.1 && r < 3:
			c = 2
		default:
			continue
		}
		d.X = append(d.X, x, y)
		d.Y = append(d.Y, c)
	}
	return d
}

func TestTrainMatchesOnnxRuntime(t *testing.T) {
	tests := []struct {
		name string
		data func(seed uint64, rows int) *trainer.Dataset
		cfg  trainer.Config
	}{
		{name: "logistic", data: linearSet, cfg: trainer.Config{Seed: 1, Epochs: 40}},
		{name: "mlp-binary", data: linearSet, cfg: trainer.Config{Kind: trainer.KindMLP, Hidden: []int{8}, Seed: 2, Epochs: 40}},
		{name: "mlp-rings", data: ringSet, cfg: trainer.Config{Kind: trainer.KindMLP, Hidden: []int{32, 32}, Seed: 3, Epochs: 150, LearningRate: 0.01}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := trainer.Train(context.Background(), tc.data(10, 1500), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Accuracy < 0.9 {
				t.Fatalf("holdout accuracy %.3f < 0.9 (train %.3f, loss %.3f)", res.Accuracy, res.TrainAccuracy, res.Loss)
			}
			// Fresh rows from the same distribution, run through ONNX
			// Runtime on raw (unstandardised) features.
			test := tc.data(99, 500)
			f, n := len(test.Features), test.Rows()
			x := make([]float32, len(test.X))
			for i, v := range test.X {
				x[i] = float32(v)
			}
			width := res.Classes
			if width == 2 {
				width = 1
			}
			got := orttest.Run(t, res.Model, "input", "output", x, n, f, width)
			want := onnx.Predict(res.Layers, x, n)
			for i := range want {
				if d := math.Abs(float64(want[i] - got[i])); d > 1e-4 {
					t.Fatalf("output %d: Go %g, ONNX Runtime %g", i, want[i], got[i])
				}
			}
			correct := 0
			for r := 0; r < n; r++ {
				if argmax(got[r*width:(r+1)*width]) == test.Y[r] {
					correct++
				}
			}
			if acc := float64(correct) / float64(n); acc < 0.9 {
				t.Fatalf("ONNX Runtime accuracy on fresh rows %.3f < 0.9", acc)
			}
		})
	}
}

func argmax(p []float32) int {
	if len(p) == 1 {
		if p[0] >= 0.5 {
			return 1
		}
		return 0
	}
	best := 0
	for k := range p {
		if p[k] > p[best] {
			best = k
		}
	}
	return best
}

func TestTrainDeterministic(t *testing.T) {
	ds := linearSet(4, 300)
	cfg := trainer.Config{Kind: trainer.KindMLP, Hidden: []int{4}, Epochs: 5, Seed: 7}
	a, err := trainer.Train(context.Background(), ds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := trainer.Train(context.Background(), ds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Model, b.Model) {
		t.Fatal("same data, config and seed gave different models")
	}
}

func TestReference(t *testing.T) {
	ds := linearSet(5, 2000)
	res, err := trainer.Train(context.Background(), ds, trainer.Config{Epochs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res.Reference)
	if err != nil {
		t.Fatal(err)
	}
	var ref drift.Reference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, []string{ref.Features[0].Name, ref.Features[1].Name, ref.Features[2].Name}); diff != "" {
		t.Fatalf("feature names (-want +got):\n%s", diff)
	}
	// linearSet draws a ~ N(50, 100²) (truncated near the boundary only).
	a := ref.Features[0]
	if math.Abs(a.Mean-50) > 10 || math.Abs(a.Std-100)/100 > 0.1 {
		t.Fatalf("feature a: mean %.2f std %.2f, want about 50 and 100", a.Mean, a.Std)
	}
	if a.Count != res.TrainRows || len(a.Edges) != 9 || len(a.Sample) != drift.DefaultSampleSize {
		t.Fatalf("feature a: count %d (train rows %d), %d edges, %d samples", a.Count, res.TrainRows, len(a.Edges), len(a.Sample))
	}
	for _, fr := range append(ref.Features, *ref.Prediction) {
		if err := fr.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if p := ref.Prediction; p == nil || p.Min < 0 || p.Max > 1 {
		t.Fatalf("prediction summary %+v: want scores in [0, 1]", p)
	}
}

func TestTrainErrors(t *testing.T) {
	good := linearSet(1, 50)
	oneClass := &trainer.Dataset{Features: []string{"a"}, X: []float64{1, 2, 3}, Y: []int{1, 1, 1}, Classes: 2}
	tests := []struct {
		name string
		ds   *trainer.Dataset
		cfg  trainer.Config
		want error
	}{
		{name: "kind", ds: good, cfg: trainer.Config{Kind: "forest"}, want: trainer.ErrConfig},
		{name: "hidden", ds: good, cfg: trainer.Config{Kind: trainer.KindMLP, Hidden: []int{0}}, want: trainer.ErrConfig},
		{name: "holdout", ds: good, cfg: trainer.Config{Holdout: 1}, want: trainer.ErrConfig},
		{name: "lr", ds: good, cfg: trainer.Config{LearningRate: -1}, want: trainer.ErrConfig},
		{name: "one-class", ds: oneClass, want: trainer.ErrDataset},
		{name: "shape", ds: &trainer.Dataset{Features: []string{"a", "b"}, X: []float64{1}, Y: []int{0, 1}, Classes: 2}, want: trainer.ErrDataset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := trainer.Train(context.Background(), tc.ds, tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := trainer.Train(ctx, good, trainer.Config{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: want context.Canceled, got %v", err)
	}
}

func TestReadCSV(t *testing.T) {
	ds, err := trainer.ReadCSV(strings.NewReader("label, x1,x2\n1,0.5,2\n0, -1, 3e2\n2,0,0\n"), "label")
	if err != nil {
		t.Fatal(err)
	}
	want := &trainer.Dataset{Features: []string{"x1", "x2"}, Label: "label", X: []float64{0.5, 2, -1, 300, 0, 0}, Y: []int{1, 0, 2}, Classes: 3}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	var buf bytes.Buffer
	if err := ds.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := trainer.ReadCSV(&buf, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

// TestClassNames: a label column of names gives sorted classes, a model
// that carries the names in its metadata, and a CSV that reads back the
// same.
func TestClassNames(t *testing.T) {
	in := "x,species\n0.1,versicolor\n2.0,setosa\n0.2,versicolor\n2.1,setosa\n5,virginica\n5.2,virginica\n"
	ds, err := trainer.ReadCSV(strings.NewReader(in), "species")
	if err != nil {
		t.Fatal(err)
	}
	want := &trainer.Dataset{Features: []string{"x"}, Label: "species", X: []float64{0.1, 2, 0.2, 2.1, 5, 5.2},
		Y: []int{1, 0, 1, 0, 2, 2}, Classes: 3, ClassNames: []string{"setosa", "versicolor", "virginica"}}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	var buf bytes.Buffer
	if err := ds.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	if back, err := trainer.ReadCSV(&buf, "species"); err != nil || !cmp.Equal(want, back) {
		t.Fatalf("round trip: %v\n%s", err, cmp.Diff(want, back))
	}
	res, err := trainer.Train(context.Background(), ds, trainer.Config{Epochs: 5, Holdout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(res.ClassNames, want.ClassNames) {
		t.Errorf("result class names %v, want %v", res.ClassNames, want.ClassNames)
	}
	for _, s := range []string{trainer.ClassNamesKey, `["setosa","versicolor","virginica"]`} {
		if !bytes.Contains(res.Model, []byte(s)) {
			t.Errorf("model metadata lacks %s", s)
		}
	}
}

func TestDatasetAdd(t *testing.T) {
	ds := trainer.NewDataset([]string{"a", "b"}, "y")
	for i, row := range [][]float64{{1, 2}, {3, 4}} {
		if err := ds.Add(row, i*2); err != nil {
			t.Fatal(err)
		}
	}
	want := &trainer.Dataset{Features: []string{"a", "b"}, Label: "y", X: []float64{1, 2, 3, 4}, Y: []int{0, 2}, Classes: 3}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		row []float64
		y   int
	}{{[]float64{1}, 0}, {[]float64{math.NaN(), 1}, 0}, {[]float64{1, 1}, -1}} {
		if err := ds.Add(tc.row, tc.y); !errors.Is(err, trainer.ErrDataset) {
			t.Errorf("Add(%v, %d): want ErrDataset, got %v", tc.row, tc.y, err)
		}
	}
	if ds.Rows() != 2 {
		t.Fatalf("rejected rows were added: %d rows", ds.Rows())
	}
}

func TestReadCSVErrors(t *testing.T) {
	tests := []struct{ name, in, label, want string }{
		{name: "empty", in: "", want: "empty file"},
		{name: "no-label", in: "a,b\n1,0\n", label: "y", want: `no label column "y"`},
		{name: "one-column", in: "y\n1\n", want: "at least one feature"},
		{name: "not-number", in: "a,y\n1,0\nx,1\n", want: `line 3 column 1 (a): "x" is not a number`},
		{name: "bad-label", in: "a,y\n1,0.5\n", want: `line 2 column 2 (y): label "0.5"`},
		{name: "ragged", in: "a,y\n1,0\n1\n", want: "wrong number of fields"},
		{name: "no-rows", in: "a,y\n", want: "no data rows"},
		{name: "name-then-number", in: "a,y\n1,cat\n2,1\n", want: `line 3 column 2 (y): label "1" is a number but line 2's is a name`},
		{name: "number-then-name", in: "a,y\n1,0\n2,dog\n", want: `line 3 column 2 (y): label "dog" is a name but line 2's is a number`},
		{name: "empty-label", in: "a,y\n1,cat\n2, \n", want: "line 3 column 2 (y): empty label"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trainer.ReadCSV(strings.NewReader(tc.in), tc.label)
			if !errors.Is(err, trainer.ErrDataset) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrDataset containing %q, got %v", tc.want, err)
			}
		})
	}
}

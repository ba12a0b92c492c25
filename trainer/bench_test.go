package trainer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-mesh/strata/trainer"
)

// BenchmarkTrain measures the built-in trainer end to end (standardise,
// Adam epochs, encode ONNX, summarise the reference) on seeded synthetic
// sets, reporting the wall time of one training and the holdout accuracy.
func BenchmarkTrain(b *testing.B) {
	cases := []struct {
		name string
		data *trainer.Dataset
		cfg  trainer.Config
	}{
		{"model=logistic/rows=5000", linearSet(1, 5000), trainer.Config{Seed: 1, Epochs: 50}},
		{"model=mlp-32x32/rows=5000", ringSet(1, 5000), trainer.Config{Kind: trainer.KindMLP, Seed: 1, Epochs: 50}},
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("%s/impl=strata", tc.name), func(b *testing.B) {
			var res *trainer.Result
			var took time.Duration
			for range b.N {
				start := time.Now()
				var err error
				res, err = trainer.Train(context.Background(), tc.data, tc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				took = time.Since(start)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(took.Seconds(), "s")
			b.ReportMetric(res.Accuracy, "accuracy")
			b.ReportMetric(float64(len(res.Model)), "bytes")
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/trainer"
)

// What the dev mesh publishes for the policies under examples/: the card
// transactions table they train on and the fraud model they serve, so
// that each runs as written on `strata dev` (examples/README.md).
const (
	exampleDataset     = "transactions"
	exampleModel       = "fraud"
	exampleVersion     = "1"
	exampleRows        = 2000
	exampleLabelColumn = "label"
)

// exampleFeatures are the transactions table's feature columns, as
// examples/pytorch-ddp/make_data.py writes them.
var exampleFeatures = []string{"amount", "merchant_risk", "hour", "distance_km", "foreign"}

// exampleTransactions makes the examples' synthetic card transactions:
// the columns and the generating model of examples/pytorch-ddp/make_data.py
// (the fraud label drawn from a logistic model of the features, about 17%
// fraud, learnable but not separable), from Go's seeded generator, so the
// same rows every run.
func exampleTransactions(rows int) *trainer.Dataset {
	r := rand.New(rand.NewPCG(2026, 11))
	// gamma draws Gamma(k, 1) for a whole k: a sum of k exponentials.
	gamma := func(k int) float64 {
		s := 0.0
		for range k {
			s += r.ExpFloat64()
		}
		return s
	}
	round := func(v float64, places int) float64 {
		p := math.Pow(10, float64(places))
		return math.Round(v*p) / p
	}
	ds := trainer.NewDataset(exampleFeatures, exampleLabelColumn)
	for range rows {
		amount := round(math.Exp(3.5+r.NormFloat64()), 2)
		a, b := gamma(2), gamma(5)
		risk := round(a/(a+b), 4) // Beta(2, 5)
		hour := float64(r.IntN(24))
		dist := round(20*r.ExpFloat64(), 2)
		foreign := 0.0
		if r.Float64() < 0.1 {
			foreign = 1
		}
		night := 0.0
		if hour < 6 || hour >= 23 {
			night = 1
		}
		z := -6 + 0.6*math.Log(amount) + 4*risk + 1.2*night + 0.02*dist + 1.5*foreign
		y := 0
		if r.Float64() < 1/(1+math.Exp(-z)) {
			y = 1
		}
		_ = ds.Add([]float64{amount, risk, hour, dist, foreign}, y)
	}
	return ds
}

// publishExamples pushes what the policies under examples/ read: dataset
// transactions@1 and model fraud@1 (logistic regression on it, with its
// drift reference), on the agent cl talks to.
func publishExamples(ctx context.Context, w io.Writer, cl *client.Client) error {
	ds := exampleTransactions(exampleRows)
	var b bytes.Buffer
	if err := ds.WriteCSV(&b); err != nil {
		return err
	}
	if _, err := cl.Push(ctx, client.PushSpec{Kind: api.KindDataset, Name: exampleDataset, Version: exampleVersion}, &b, int64(b.Len())); err != nil {
		return fmt.Errorf("pushing dataset %s@%s: %w", exampleDataset, exampleVersion, err)
	}
	res, err := trainer.Train(ctx, ds, trainer.Config{Kind: trainer.KindLogistic, Seed: 1, Epochs: 20})
	if err != nil {
		return fmt.Errorf("training %s@%s: %w", exampleModel, exampleVersion, err)
	}
	ref, err := json.Marshal(res.Reference)
	if err != nil {
		return err
	}
	if _, err := cl.Push(ctx, client.PushSpec{Name: exampleModel, Version: exampleVersion, Reference: ref}, bytes.NewReader(res.Model), int64(len(res.Model))); err != nil {
		return fmt.Errorf("pushing model %s@%s: %w", exampleModel, exampleVersion, err)
	}
	fmt.Fprintf(w, "For examples/: published dataset %s@%s (%d synthetic card transactions, label column %q) and model %s@%s (logistic regression on it, holdout accuracy %.3f)\n",
		exampleDataset, exampleVersion, ds.Rows(), exampleLabelColumn, exampleModel, exampleVersion, res.Accuracy)
	return nil
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/trainer"
)

// demoPolicy serves the demo model in each edge site, within 20ms of it.
const demoPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: fraud-scorer}
spec:
  model: {name: fraud, version: "1"}
  perClientSite: true
  resources: {cpu: 500m, memory: 256Mi}
  latency: {p99: 20ms, clients: [edge-a, edge-b]}
  tiers: [edge, onprem, cloud]
`

// demoFeatures are the demo model's inputs.
var demoFeatures = []string{"amount", "hour", "distance_km"}

// trainDemoModel trains the built-in logistic regression on a seeded
// synthetic card-transaction set (fraud is likelier for large amounts far
// from home at night) and returns its ONNX bytes and holdout accuracy.
func trainDemoModel(ctx context.Context) ([]byte, float64, error) {
	r := rand.New(rand.NewPCG(7, 11))
	ds := trainer.NewDataset(demoFeatures, "fraud")
	for range 4000 {
		amount := math.Exp(r.NormFloat64()*0.8 + 3.5)
		hour := float64(r.IntN(24))
		dist := math.Abs(r.NormFloat64() * 40)
		night := 0.0
		if hour < 6 {
			night = 1
		}
		z := -6 + 0.02*amount + 0.04*dist + 1.5*night + r.NormFloat64()*0.5
		y := 0
		if z > 0 {
			y = 1
		}
		if err := ds.Add([]float64{amount, hour, dist}, y); err != nil {
			return nil, 0, err
		}
	}
	res, err := trainer.Train(ctx, ds, trainer.Config{Kind: trainer.KindLogistic, Seed: 1})
	if err != nil {
		return nil, 0, err
	}
	return res.Model, res.Accuracy, nil
}

// seedDemo trains the demo model, pushes it through the first agent's API
// and applies the demo policy, then waits until the edge serves it.
func seedDemo(ctx context.Context, stdout io.Writer, api string, nodes func() []mesh.Node) error {
	start := time.Now()
	model, acc, err := trainDemoModel(ctx)
	if err != nil {
		return fmt.Errorf("training the demo model: %w", err)
	}
	c := &clientFlags{address: "http://" + api, output: "table"}
	var m struct {
		Digest string `json:"digest"`
	}
	if err := c.doStream(http.MethodPost, "/v1/artifacts?name=fraud&version=1", bytes.NewReader(model), int64(len(model)), &m, nil); err != nil {
		return fmt.Errorf("pushing the demo model: %w", err)
	}
	fmt.Fprintf(stdout, "trained model fraud@1 (logistic regression, holdout accuracy %.3f), signed and pushed: sha256:%.12s\n", acc, m.Digest)
	if err := c.do(http.MethodPost, "/v1/policies?file=fraud-scorer.yaml", "application/yaml", []byte(demoPolicy), nil, nil); err != nil {
		return fmt.Errorf("applying the demo policy: %w", err)
	}
	fmt.Fprintln(stdout, "applied InferenceService/fraud-scorer: one replica per edge site, p99 20ms")
	deadline := time.Now().Add(90 * time.Second)
	for {
		var serving []string
		for _, n := range nodes() {
			for _, mv := range n.Models {
				if mv == "fraud@1" {
					serving = append(serving, n.Name)
				}
			}
		}
		if len(serving) >= 2 {
			fmt.Fprintf(stdout, "fraud@1 serving on %s (%s after start)\n", strings.Join(serving, " and "), time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo model was not served within 90s (see strata placements)")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

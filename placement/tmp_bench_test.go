package placement_test

import (
	"fmt"
	"testing"

	"github.com/strata-mesh/strata/placement"
)

func BenchmarkTmpUniform(b *testing.B) {
	s := uniformSnapshot(b, 10000)
	cons := compile(b, true, `node.tier == "onprem" && node.arch == "amd64"`)
	req := &placement.Request{Kind: placement.Inference, Key: "x", Replicas: 1, Resources: placement.Resources{CPU: 1000, Memory: 2 * gib}, Constraints: []placement.Constraint{cons}}
	e, _ := placement.New(placement.Options{})
	b.ReportAllocs()
	for k := 0; k < b.N; k++ {
		req.Seed = uint64(k)
		d, err := e.Place(s, req)
		if err != nil || !d.Feasible {
			b.Fatal(err)
		}
		if k == 0 {
			fmt.Println(d.Metrics)
		}
	}
}

func BenchmarkTmpGang(b *testing.B) {
	topo := benchTopology(b, 10000)
	req := topo.TrainingRequest(1, 8, 8)
	e, _ := placement.New(placement.Options{})
	b.ReportAllocs()
	for k := 0; k < b.N; k++ {
		req.Seed = uint64(k)
		d, err := e.Place(topo.Snapshot, req)
		if err != nil || !d.Feasible {
			b.Fatal(err)
		}
		if k == 0 {
			fmt.Println(d.Metrics, len(d.Placements))
		}
	}
}

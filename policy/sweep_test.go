package policy

import (
	"testing"

	"github.com/strata-mesh/strata/sweep"
)

// TestSweepSeedZero: seed: 0 is a seed of its own, not the default 1,
// and proposes other trials.
func TestSweepSeedZero(t *testing.T) {
	t.Parallel()
	const src = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: tune}
spec:
  command: [sh, train.sh]
  sweep:
    parameters:
      - {name: q, min: 0, max: 1}
`
	seeds := map[string]int64{"": 1, "    seed: 0\n": 0, "    seed: 7\n": 7}
	first := map[int64]float64{}
	for line, want := range seeds {
		docs, err := Parse("tune.yaml", []byte(src+line))
		if err != nil {
			t.Fatal(err)
		}
		sw := docs[0].TrainingJob.Sweep
		if sw.Seed != want {
			t.Errorf("%q: seed %d, want %d", line, sw.Seed, want)
		}
		alg, err := sweep.New(sw.Algorithm, sweep.Space{{Name: "q", Kind: ParamFloat, Min: 0, Max: 1}}, uint64(sw.Seed), sweep.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pt, _ := alg.Next(nil)
		first[sw.Seed] = pt[0]
	}
	if first[0] == first[1] {
		t.Errorf("seeds 0 and 1 propose the same first trial %v", first[0])
	}
}

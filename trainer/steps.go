package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Per-step metrics: a job reports how training goes, step by step (an
// epoch, an evaluation), by appending one JSON object per line to the file
// named by $STRATA_METRICS_FILE (StepsFile in its output directory):
//
//	{"step": 1, "accuracy": 0.81, "loss": 0.52}
//	{"step": 2, "accuracy": 0.86, "loss": 0.41}
//
// "step" is optional (the step's position among those reported when
// absent); every other field is a metric and must be a number. The agent
// reads the file while the job runs and keeps the steps in the job's
// record: `strata experiments` draws a trial's curve from them, and a
// sweep's early stopping compares trials by them. Only rank 0 gets the
// variable; the final metrics still go to metrics.json.
const (
	// StepsFile is the per-step metrics file in the output directory.
	StepsFile = "steps.jsonl"
	// StepsEnv names StepsFile's path in a job's environment.
	StepsEnv = "STRATA_METRICS_FILE"
	// MaxSteps is the most steps read from one job; later ones are
	// ignored.
	MaxSteps = 1000
)

// Step is one line of the per-step metrics file.
type Step struct {
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// ReadSteps reads the per-step metrics file at path: every complete line,
// at most MaxSteps. A line that is not a JSON object of numbers is skipped
// and counted in bad (so a job's stray print does not stop the curve); a
// missing file is no steps.
func ReadSteps(path string) (steps []Step, bad int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, 64<<20))
	for len(steps) < MaxSteps {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // EOF, or a line still being written
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		s, ok := parseStep(line, len(steps)+1)
		if !ok {
			bad++
			continue
		}
		steps = append(steps, s)
	}
	return steps, bad, nil
}

func parseStep(line []byte, def int) (Step, bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(line, &raw) != nil || len(raw) == 0 {
		return Step{}, false
	}
	s := Step{Step: def, Metrics: map[string]float64{}}
	for k, v := range raw {
		var x float64
		if json.Unmarshal(v, &x) != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Step{}, false
		}
		if k == "step" {
			if x != math.Trunc(x) || x < 0 || x > math.MaxInt32 {
				return Step{}, false
			}
			s.Step = int(x)
			continue
		}
		s.Metrics[k] = x
	}
	return s, len(s.Metrics) > 0
}

// appendStep appends s as one line to the per-step metrics file at path.
func appendStep(path string, s Step) error {
	m := make(map[string]float64, len(s.Metrics)+1)
	for k, v := range s.Metrics {
		m[k] = v
	}
	m["step"] = float64(s.Step)
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("trainer: writing %s: %w", path, err)
	}
	return nil
}

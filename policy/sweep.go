package policy

import (
	"fmt"
	"regexp"
	"slices"
)

// Sweep algorithms, parameter types and goals.
const (
	SweepRandom = "random"
	SweepGrid   = "grid"
	SweepTPE    = "tpe"

	ParamFloat       = "float"
	ParamInt         = "int"
	ParamCategorical = "categorical"

	GoalMaximize = "maximize"
	GoalMinimize = "minimize"
)

// BuiltinSweepParams are the builtin trainer's settings a sweep can set.
var BuiltinSweepParams = []string{"algorithm", "epochs", "hidden", "holdout", "learningRate"}

var paramNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// setDefaults fills in what the sweep leaves out; seedSet says whether
// the document wrote a seed, so that seed: 0 stays 0.
func (sw *Sweep) setDefaults(seedSet bool) {
	if sw.Algorithm == "" {
		sw.Algorithm = SweepRandom
	}
	if sw.Objective.Metric == "" {
		sw.Objective.Metric = "accuracy"
	}
	if sw.Objective.Goal == "" {
		sw.Objective.Goal = GoalMaximize
		if sw.Objective.Metric == "loss" {
			sw.Objective.Goal = GoalMinimize
		}
	}
	if sw.MaxTrials == 0 {
		sw.MaxTrials = 12
	}
	if sw.ParallelTrials == 0 {
		sw.ParallelTrials = 2
	}
	if sw.MaxFailedTrials == 0 {
		sw.MaxFailedTrials = 3
	}
	if sw.Seed == 0 && !seedSet {
		sw.Seed = 1
	}
	if es := sw.EarlyStopping; es != nil {
		if es.Rule == "" {
			es.Rule = StopMedian
		}
		if es.MinSteps == 0 {
			es.MinSteps = 5
		}
		if es.MinTrials == 0 {
			es.MinTrials = 3
		}
	}
	for i := range sw.Parameters {
		prm := &sw.Parameters[i]
		if prm.Type == "" {
			prm.Type = ParamFloat
			if len(prm.Values) > 0 {
				prm.Type = ParamCategorical
			}
		}
		if prm.Scale == "" && prm.Type != ParamCategorical {
			prm.Scale = "linear"
		}
	}
}

// sweep checks a TrainingJob's sweep block at p.
func (d *decoder) sweep(s *TrainingJobSpec, p string) {
	sw := s.Sweep
	switch sw.Algorithm {
	case "", SweepRandom, SweepGrid, SweepTPE:
	default:
		d.errField(p+".algorithm", fmt.Sprintf("%q is not a search algorithm: use random, grid or tpe", sw.Algorithm))
	}
	if es := sw.EarlyStopping; es != nil {
		if es.Rule != "" && es.Rule != StopMedian {
			d.errField(p+".earlyStopping.rule", fmt.Sprintf("%q is not an early stopping rule: use median", es.Rule))
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"minSteps", es.MinSteps}, {"minTrials", es.MinTrials}} {
			if f.v < 0 || f.v > 100000 || (f.v == 0 && d.isSet(p+".earlyStopping."+f.name)) {
				d.errField(p+".earlyStopping."+f.name, fmt.Sprintf("want 1 to 100000, got %d", f.v))
			}
		}
	}
	switch sw.Objective.Goal {
	case "", GoalMaximize, GoalMinimize:
	default:
		d.errField(p+".objective.goal", fmt.Sprintf("%q: use maximize or minimize", sw.Objective.Goal))
	}
	if m := sw.Objective.Metric; m != "" && !paramNameRE.MatchString(m) {
		d.errField(p+".objective.metric", fmt.Sprintf("%q is not a metric name: letters, digits and _", m))
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"maxTrials", sw.MaxTrials, 1000}, {"parallelTrials", sw.ParallelTrials, 64}, {"maxFailedTrials", sw.MaxFailedTrials, 1000}} {
		if f.v < 0 || f.v > f.max || (f.v == 0 && d.isSet(p+"."+f.name)) {
			d.errField(p+"."+f.name, fmt.Sprintf("want 1 to %d, got %d", f.max, f.v))
		}
	}
	if len(sw.Parameters) == 0 {
		d.errField(p+".parameters", "a sweep needs at least one parameter")
	}
	builtin := s.launcher() == LauncherBuiltin
	seen := map[string]bool{}
	for i, prm := range sw.Parameters {
		f := fmt.Sprintf("%s.parameters[%d]", p, i)
		switch {
		case !paramNameRE.MatchString(prm.Name):
			d.errField(f+".name", fmt.Sprintf("%q is not a parameter name: letters, digits and _", prm.Name))
		case seen[prm.Name]:
			d.errField(f+".name", fmt.Sprintf("%q is swept twice", prm.Name))
		case builtin && !slices.Contains(BuiltinSweepParams, prm.Name):
			d.errField(f+".name", fmt.Sprintf("%q is not a builtin setting a sweep can set: use one of %v", prm.Name, BuiltinSweepParams))
		}
		seen[prm.Name] = true
		typ := prm.Type
		if typ == "" {
			typ = ParamFloat
			if len(prm.Values) > 0 {
				typ = ParamCategorical
			}
		}
		switch typ {
		case ParamCategorical:
			if len(prm.Values) == 0 {
				d.errField(f+".values", "a categorical parameter needs values")
			}
			if d.isSet(f+".min") || d.isSet(f+".max") || d.isSet(f+".scale") {
				d.errField(f, "a categorical parameter takes values, not min, max or scale")
			}
		case ParamFloat, ParamInt:
			if len(prm.Values) > 0 {
				d.errField(f+".values", fmt.Sprintf("a %s parameter takes min and max; values make it categorical", typ))
			}
			if !d.isSet(f+".min") || !d.isSet(f+".max") || !(prm.Min <= prm.Max) {
				d.errField(f, fmt.Sprintf("a %s parameter needs min <= max, got %v and %v", typ, prm.Min, prm.Max))
			}
			if typ == ParamInt && (prm.Min != float64(int64(prm.Min)) || prm.Max != float64(int64(prm.Max))) {
				d.errField(f, fmt.Sprintf("an int parameter needs whole min and max, got %v and %v", prm.Min, prm.Max))
			}
			switch prm.Scale {
			case "", "linear":
			case "log":
				if prm.Min <= 0 {
					d.errField(f+".min", fmt.Sprintf("a log scale needs min > 0, got %v", prm.Min))
				}
			default:
				d.errField(f+".scale", fmt.Sprintf("%q: use linear or log", prm.Scale))
			}
		default:
			d.errField(f+".type", fmt.Sprintf("%q: use float, int or categorical", prm.Type))
		}
	}
}

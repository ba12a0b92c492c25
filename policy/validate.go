package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	digestRE  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	validTier = map[string]bool{"edge": true, "onprem": true, "cloud": true}
)

// validate applies defaults, checks every value and compiles expressions,
// recording each problem at its field.
func (d *decoder) validate(doc *Document) {
	m := doc.Metadata
	switch {
	case m.Name == "":
		d.errField("metadata.name", "required field is missing")
	case len(m.Name) > 63 || !nameRE.MatchString(m.Name):
		d.errField("metadata.name", fmt.Sprintf("%q is not a valid name: lower-case letters, digits and '-', starting with a letter, at most 63 characters", m.Name))
	}
	if s := doc.InferenceService; s != nil {
		d.inference(s)
	}
	if s := doc.TrainingJob; s != nil {
		d.training(s, "spec")
	}
}

func (d *decoder) inference(s *InferenceServiceSpec) {
	const p = "spec"
	if s.Model.Name == "" && s.Model.Digest == "" {
		d.errField(p+".model", "name a model: {name: NAME, version: V} or {digest: sha256:...}")
	}
	if s.Model.Digest != "" && !digestRE.MatchString(s.Model.Digest) {
		d.errField(p+".model.digest", fmt.Sprintf("%q is not a digest: want sha256: and 64 hex digits", s.Model.Digest))
	}
	if _, set := d.pos[p+".replicas"]; set && s.Replicas < 1 {
		d.errField(p+".replicas", fmt.Sprintf("must be at least 1, got %d", s.Replicas))
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Replicas > 10000 {
		d.errField(p+".replicas", fmt.Sprintf("%d replicas is more than the 10000 supported", s.Replicas))
	}
	d.resources(&s.Resources, p+".resources")
	if s.Latency != nil {
		if s.Latency.P99 <= 0 {
			d.errField(p+".latency.p99", "must be a positive duration such as 20ms")
		} else if time.Duration(s.Latency.P99) > time.Minute {
			d.errField(p+".latency.p99", fmt.Sprintf("%s is not a latency SLO: at most 1m", time.Duration(s.Latency.P99)))
		}
		if len(s.Latency.Clients) == 0 {
			d.errField(p+".latency.clients", "name the client sites or regions the SLO is measured from")
		}
	}
	if s.PerClientSite && (s.Latency == nil || len(s.Latency.Clients) == 0) {
		d.errField(p+".perClientSite", "needs latency.clients: the sites to serve")
	}
	s.Tiers = d.tiers(s.Tiers, p+".tiers", defaultInferenceTiers)
	switch s.Spread {
	case "", "site", "region":
	default:
		d.errField(p+".spread", fmt.Sprintf("%q is not a spread domain: use site or region", s.Spread))
	}
	d.exprs(s.Constraints, s.Affinities, p)
	if r := s.Rollout; r != nil {
		switch r.Strategy {
		case "":
			r.Strategy = "canary"
		case "canary", "all":
		default:
			d.errField(p+".rollout.strategy", fmt.Sprintf("%q is not a strategy: use canary or all", r.Strategy))
		}
		if r.CanaryRequests < 0 {
			d.errField(p+".rollout.canaryRequests", "must not be negative")
		}
		if r.CanaryRequests == 0 {
			r.CanaryRequests = 100
		}
		if r.MaxErrorRate < 0 || r.MaxErrorRate > 1 {
			d.errField(p+".rollout.maxErrorRate", "must be between 0 and 1")
		}
		if r.MaxErrorRate == 0 {
			r.MaxErrorRate = 0.01
		}
	}
	if dr := s.Drift; dr != nil {
		switch dr.Detector {
		case "":
			dr.Detector = "psi"
		case "psi", "ks", "wasserstein":
		default:
			d.errField(p+".drift.detector", fmt.Sprintf("%q is not a detector: use psi, ks or wasserstein", dr.Detector))
		}
		if dr.Threshold < 0 {
			d.errField(p+".drift.threshold", "must not be negative")
		}
		if dr.Threshold == 0 {
			dr.Threshold = map[string]float64{"psi": 0.2, "ks": 0.01, "wasserstein": 0.3}[dr.Detector]
		}
		if dr.Window < 0 || (dr.Window > 0 && dr.Window < 30) {
			d.errField(p+".drift.window", fmt.Sprintf("%d samples is too few to compare distributions: at least 30", dr.Window))
		}
		if dr.Window == 0 {
			dr.Window = 500
		}
		switch dr.Reference {
		case "":
			dr.Reference = "training"
		case "training", "first":
		default:
			d.errField(p+".drift.reference", fmt.Sprintf("%q is not a reference: use training or first", dr.Reference))
		}
	}
	if s.Retrain != nil {
		d.training(s.Retrain, p+".retrain")
	}
}

func (d *decoder) training(s *TrainingJobSpec, p string) {
	d.resources(&s.Resources, p+".resources")
	g := &s.Gang
	if _, set := d.pos[p+".gang.nodes"]; set && g.Nodes < 1 {
		d.errField(p+".gang.nodes", fmt.Sprintf("must be at least 1, got %d", g.Nodes))
	}
	if g.Nodes == 0 {
		g.Nodes = 1
	}
	if g.GPUsPerNode < 0 {
		d.errField(p+".gang.gpusPerNode", "must not be negative")
	}
	if g.GPUsPerNode == 0 && s.Resources.GPUs != nil {
		g.GPUsPerNode = s.Resources.GPUs.Count
	}
	if g.GPUsPerNode > 64 {
		d.errField(p+".gang.gpusPerNode", fmt.Sprintf("%d GPUs on one node is more than any node has", g.GPUsPerNode))
	}
	if s.Resources.GPUs != nil && g.GPUsPerNode != s.Resources.GPUs.Count {
		d.errField(p+".gang.gpusPerNode", fmt.Sprintf("%d disagrees with resources.gpus.count %d: set one of them", g.GPUsPerNode, s.Resources.GPUs.Count))
	}
	switch g.Fabric {
	case "":
		g.Fabric = "same"
	case "same", "any":
	default:
		d.errField(p+".gang.fabric", fmt.Sprintf("%q: use same (one RDMA fabric) or any", g.Fabric))
	}
	for i, ref := range s.Data {
		f := fmt.Sprintf("%s.data[%d]", p, i)
		switch {
		case (ref.Dataset == "") == (ref.Artifact == ""):
			d.errField(f, "set exactly one of dataset and artifact")
		case ref.Artifact != "" && !digestRE.MatchString(ref.Artifact):
			d.errField(f+".artifact", fmt.Sprintf("%q is not a digest: want sha256: and 64 hex digits", ref.Artifact))
		}
		if ref.Size < 0 {
			d.errField(f+".size", "must not be negative")
		}
	}
	switch s.Launcher {
	case "":
		s.Launcher = "builtin"
		if len(s.Command) > 0 {
			s.Launcher = "exec"
		}
	case "exec", "builtin":
	default:
		d.errField(p+".launcher", fmt.Sprintf("%q is not a launcher: use exec or builtin", s.Launcher))
	}
	if s.Launcher == "exec" && len(s.Command) == 0 {
		d.errField(p+".command", "the exec launcher needs a command")
	}
	if s.Launcher == "builtin" {
		if len(s.Command) > 0 {
			d.errField(p+".command", "the builtin launcher runs no command: set launcher: exec")
		}
		if s.Builtin == nil {
			s.Builtin = &Builtin{}
		}
		b := s.Builtin
		switch b.Algorithm {
		case "":
			b.Algorithm = "logreg"
		case "logreg", "mlp":
		default:
			d.errField(p+".builtin.algorithm", fmt.Sprintf("%q is not an algorithm: use logreg or mlp", b.Algorithm))
		}
		if b.Algorithm == "mlp" && len(b.Hidden) == 0 {
			b.Hidden = []int{32}
		}
		for i, h := range b.Hidden {
			if h < 1 || h > 4096 {
				d.errField(fmt.Sprintf("%s.builtin.hidden[%d]", p, i), fmt.Sprintf("layer size %d: want 1 to 4096", h))
			}
		}
		if b.Epochs < 0 {
			d.errField(p+".builtin.epochs", "must not be negative")
		}
		if b.Epochs == 0 {
			b.Epochs = 20
		}
		if b.LearningRate < 0 {
			d.errField(p+".builtin.learningRate", "must not be negative")
		}
		if b.LearningRate == 0 {
			b.LearningRate = 0.01
		}
	} else if s.Builtin != nil {
		d.errField(p+".builtin", "only the builtin launcher takes builtin settings")
	}
	if _, set := d.pos[p+".maxDuration"]; set && s.MaxDuration <= 0 {
		d.errField(p+".maxDuration", "must be a positive duration such as 2h")
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = Duration(24 * time.Hour)
	}
	if s.Retries < 0 {
		d.errField(p+".retries", "must not be negative")
	}
	s.Tiers = d.tiers(s.Tiers, p+".tiers", defaultTrainingTiers)
	d.exprs(s.Constraints, s.Affinities, p)
}

func (d *decoder) resources(r *Resources, p string) {
	if r.CPU < 0 || r.Memory < 0 {
		d.errField(p, "resources must not be negative")
	}
	if g := r.GPUs; g != nil {
		if g.Count < 1 {
			d.errField(p+".gpus.count", fmt.Sprintf("must be at least 1 when gpus is set, got %d", g.Count))
		}
		if g.Memory < 0 {
			d.errField(p+".gpus.memory", "must not be negative")
		}
	}
}

func (d *decoder) tiers(ts []string, p string, def []string) []string {
	if ts == nil {
		return slices.Clone(def)
	}
	if len(ts) == 0 {
		d.errField(p, "name at least one tier")
	}
	seen := map[string]bool{}
	for i, t := range ts {
		f := fmt.Sprintf("%s[%d]", p, i)
		if !validTier[t] {
			d.errField(f, fmt.Sprintf("%q is not a tier: use edge, onprem or cloud", t))
		}
		if seen[t] {
			d.errField(f, fmt.Sprintf("tier %q is listed twice", t))
		}
		seen[t] = true
	}
	return ts
}

// exprs compiles constraints (boolean) and affinities (boolean or numeric).
func (d *decoder) exprs(cons []*Expr, affs []Affinity, p string) {
	for i, c := range cons {
		d.compile(c, fmt.Sprintf("%s.constraints[%d]", p, i), false)
	}
	for i := range affs {
		f := fmt.Sprintf("%s.affinities[%d]", p, i)
		if affs[i].Expr == nil {
			d.errField(f+".expr", "required field is missing")
		} else {
			d.compile(affs[i].Expr, f+".expr", true)
		}
		if affs[i].Weight < 0 {
			d.errField(f+".weight", "must not be negative")
		}
		if _, set := d.pos[f+".weight"]; !set {
			affs[i].Weight = 1
		}
	}
}

func (d *decoder) compile(x *Expr, field string, numeric bool) {
	if x == nil {
		d.errField(field, "empty expression")
		return
	}
	c, err := compileExpr(x.src, numeric)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		d.errAt(x.pos, field, "CEL: "+strings.Join(strings.Fields(msg), " "))
		return
	}
	x.prog, x.out = c.prog, c.out
}

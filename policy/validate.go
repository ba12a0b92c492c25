package policy

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	modelRE   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	datasetRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(:[A-Za-z0-9][-A-Za-z0-9_.]*)?$`)
	labelRE   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	envRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	digestRE  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	validTier = map[string]bool{TierEdge: true, TierOnPrem: true, TierCloud: true}
)

// Limits a document must stay within.
const (
	// MaxReplicas bounds InferenceService.Replicas.
	MaxReplicas = 10000
	// MaxGangNodes bounds Gang.Nodes.
	MaxGangNodes = 4096
	// MaxGPUsPerNode bounds Gang.GPUsPerNode: no node has more.
	MaxGPUsPerNode = 64
	// MaxRanksPerNode bounds Gang.RanksPerNode.
	MaxRanksPerNode = 256
	// MaxRetries bounds TrainingJobSpec.Retries.
	MaxRetries = 100
	// MaxLatency bounds Latency.P99: anything longer is not an RTT SLO.
	MaxLatency = time.Minute
	// MinDriftWindow is the fewest samples a drift window may hold.
	MinDriftWindow = 30
)

// ErrInvalid is what an ErrorList from Validate or Parse matches with
// errors.Is.
var ErrInvalid = errors.New("policy: invalid document")

// Is makes errors.Is(err, ErrInvalid) hold for every ErrorList.
func (l ErrorList) Is(target error) bool { return target == ErrInvalid }

// Validate checks every field of the document and compiles, in place, any
// expression not yet compiled; it changes nothing else. It returns nil or
// an ErrorList with every problem, each at its field's position when the
// document came from Parse (line 0 for one built in code). It accepts a
// document before or after SetDefaults: a zero value means "not set, use
// the default", except where the file wrote the zero explicitly
// (replicas: 0 is an error, not 1). It must not run concurrently with
// anything else on the same document.
func (d *Document) Validate() error {
	v := &decoder{file: d.File, pos: d.pos}
	if v.pos == nil {
		v.pos = map[string]Position{"": d.Pos}
	}
	v.validate(d)
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs.sorted()
}

// SetDefaults fills every field left unset with its documented default.
// It is idempotent and does not validate; call Validate first (Parse does
// both).
func (d *Document) SetDefaults() {
	if d.APIVersion == "" {
		d.APIVersion = APIVersion
	}
	set := func(path string) bool { _, ok := d.pos[path]; return ok }
	if s := d.InferenceService; s != nil {
		if d.Kind == "" {
			d.Kind = KindInferenceService
		}
		s.setDefaults("spec", set)
	}
	if s := d.TrainingJob; s != nil {
		if d.Kind == "" {
			d.Kind = KindTrainingJob
		}
		s.setDefaults("spec", set)
	}
}

func (s *InferenceServiceSpec) setDefaults(p string, set func(string) bool) {
	if b := s.Burst; b != nil && b.ScaleDownAfter == 0 && !set(p+".burst.scaleDownAfter") {
		b.ScaleDownAfter = Duration(DefaultScaleDownAfter)
	}
	if a := s.Autoscale; a != nil {
		if a.Min == 0 && !set(p+".autoscale.min") {
			a.Min = 1
		}
		if a.ScaleDownAfter == 0 && !set(p+".autoscale.scaleDownAfter") {
			a.ScaleDownAfter = Duration(DefaultScaleDownAfter)
		}
		if s.Replicas == 0 && !set(p+".replicas") {
			s.Replicas = a.Min
		}
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Tiers == nil {
		s.Tiers = append([]string(nil), DefaultInferenceTiers...)
	}
	affinityDefaults(s.Affinities, p, set)
	if r := s.Rollout; r != nil {
		if r.Strategy == "" {
			r.Strategy = RolloutCanary
		}
		if r.CanaryRequests == 0 && r.Strategy == RolloutCanary {
			r.CanaryRequests = 100
		}
		if r.MaxErrorRate == 0 && !set(p+".rollout.maxErrorRate") {
			r.MaxErrorRate = 0.01
		}
		if r.CanaryTimeout == 0 && r.Strategy == RolloutCanary {
			r.CanaryTimeout = Duration(DefaultCanaryTimeout)
		}
	}
	if dr := s.Drift; dr != nil {
		if dr.Detector == "" {
			dr.Detector = DetectorPSI
		}
		if dr.Threshold == 0 {
			dr.Threshold = DefaultDriftThreshold[dr.Detector]
		}
		if dr.Window == 0 {
			dr.Window = 500
		}
		if st := dr.Stream; st != nil {
			if st.FalseAlarmEvery == 0 {
				st.FalseAlarmEvery = 1000000
			}
			if st.Shift == 0 {
				st.Shift = 1
			}
		}
		if dr.Reference == "" {
			dr.Reference = ReferenceTraining
		}
	}
	if s.Retrain != nil {
		s.Retrain.setDefaults(p+".retrain", set)
	}
}

func (s *TrainingJobSpec) setDefaults(p string, set func(string) bool) {
	g := &s.Gang
	if g.Nodes == 0 {
		g.Nodes = 1
	}
	if g.GPUsPerNode == 0 && s.Resources.GPUs != nil {
		g.GPUsPerNode = s.Resources.GPUs.Count
	}
	if g.Fabric == "" {
		g.Fabric = FabricSame
	}
	if g.RanksPerNode == 0 {
		g.RanksPerNode = 1
	}
	s.Launcher = s.launcher()
	if s.Launcher == LauncherBuiltin {
		if s.Builtin == nil {
			s.Builtin = &Builtin{}
		}
		b := s.Builtin
		if b.Algorithm == "" {
			b.Algorithm = AlgorithmLogReg
		}
		if b.Algorithm == AlgorithmMLP && len(b.Hidden) == 0 {
			b.Hidden = []int{32}
		}
		if b.Epochs == 0 {
			b.Epochs = 20
		}
		if b.LearningRate == 0 {
			b.LearningRate = 0.01
		}
		if b.Holdout == 0 && !set(p+".builtin.holdout") {
			b.Holdout = 0.2
		}
		if b.Seed == 0 && !set(p+".builtin.seed") {
			b.Seed = 1
		}
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = Duration(24 * time.Hour)
	}
	if c := s.Capture; c != nil {
		if c.Rows == 0 && !set(p+".capture.rows") {
			c.Rows = DefaultCaptureRows
		}
		if c.Mix == 0 && !set(p+".capture.mix") {
			c.Mix = DefaultCaptureMix
		}
		if c.Timeout == 0 && !set(p+".capture.timeout") {
			c.Timeout = Duration(DefaultCaptureTimeout)
		}
		if c.Source == "" {
			c.Source = CaptureFeedback
		}
	}
	if sw := s.Sweep; sw != nil {
		sw.setDefaults(set(p + ".sweep.seed"))
	}
	if s.Tiers == nil {
		s.Tiers = append([]string(nil), DefaultTrainingTiers...)
	}
	affinityDefaults(s.Affinities, p, set)
}

// launcher is the launcher in effect: as written, else exec when a command
// is given, else builtin.
func (s *TrainingJobSpec) launcher() string {
	switch {
	case s.Launcher != "":
		return s.Launcher
	case len(s.Command) > 0:
		return LauncherExec
	}
	return LauncherBuiltin
}

// affinityDefaults gives weight 1 to affinities whose weight was not
// written (an explicit 0 switches one off).
func affinityDefaults(affs []Affinity, p string, set func(string) bool) {
	for i := range affs {
		if affs[i].Weight == 0 && !set(fmt.Sprintf("%s.affinities[%d].weight", p, i)) {
			affs[i].Weight = 1
		}
	}
}

// isSet reports whether the file wrote path (with a non-null value).
func (d *decoder) isSet(path string) bool { _, ok := d.pos[path]; return ok }

// validate checks doc, recording each problem at its field.
func (d *decoder) validate(doc *Document) {
	if doc.APIVersion != APIVersion {
		if doc.APIVersion == "" {
			d.errField("apiVersion", "required field is missing")
		} else {
			d.errField("apiVersion", fmt.Sprintf("%q is not supported: use %s", doc.APIVersion, APIVersion))
		}
	}
	switch {
	case doc.Kind == KindInferenceService && doc.InferenceService != nil && doc.TrainingJob == nil:
	case doc.Kind == KindTrainingJob && doc.TrainingJob != nil && doc.InferenceService == nil:
	case doc.Kind == "":
		d.errField("kind", "required field is missing")
	case doc.Kind != KindInferenceService && doc.Kind != KindTrainingJob:
		d.errField("kind", fmt.Sprintf("%q is not a policy kind: use %s or %s", doc.Kind, KindInferenceService, KindTrainingJob))
	default:
		d.errField("spec", fmt.Sprintf("a %s document needs exactly its own spec", doc.Kind))
	}
	m := doc.Metadata
	switch {
	case m.Name == "":
		d.errField("metadata.name", "required field is missing")
	case len(m.Name) > 63 || !nameRE.MatchString(m.Name):
		d.errField("metadata.name", fmt.Sprintf("%q is not a valid name: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit, at most 63 characters", m.Name))
	}
	for _, k := range sortedKeys(m.Labels) {
		if len(k) > 253 || !labelRE.MatchString(k) {
			d.errAt(d.at("metadata.labels."+k+keySuffix), "metadata.labels."+k, fmt.Sprintf("%q is not a label key: letters, digits, '-', '_' and '.', optionally after a DNS prefix and '/'", k))
		}
	}
	if s := doc.InferenceService; s != nil {
		d.inference(s, "spec")
	}
	if s := doc.TrainingJob; s != nil {
		d.training(s, "spec")
	}
}

// autoscale checks s.Autoscale: bounds that hold Replicas, one target.
func (d *decoder) autoscale(s *InferenceServiceSpec, p string) {
	a, q := s.Autoscale, p+".autoscale"
	minOK := true
	lo := a.Min
	if lo == 0 && !d.isSet(q+".min") {
		lo = 1 // the default
	}
	switch {
	case lo < 1:
		d.errField(q+".min", fmt.Sprintf("must be at least 1, got %d", a.Min))
		minOK = false
	case a.Min > MaxReplicas:
		d.errField(q+".min", fmt.Sprintf("%d replicas is more than the %d supported", a.Min, MaxReplicas))
		minOK = false
	}
	switch {
	case a.Max == 0 && !d.isSet(q+".max"):
		d.errField(q, "max is required: the most replicas the load may ask for")
	case a.Max > MaxReplicas:
		d.errField(q+".max", fmt.Sprintf("%d replicas is more than the %d supported", a.Max, MaxReplicas))
	case minOK && a.Max < lo:
		d.errField(q+".max", fmt.Sprintf("must be at least min (%d), got %d", lo, a.Max))
	case minOK && s.Replicas > 0 && (s.Replicas < lo || s.Replicas > a.Max):
		d.errField(p+".replicas", fmt.Sprintf("with autoscale it is where scaling starts: want %d to %d, got %d", lo, a.Max, s.Replicas))
	}
	t := a.Target
	set := 0
	for _, f := range []struct {
		name string
		v    float64
	}{{"rps", t.RPS}, {"inflight", t.Inflight}, {"p99", float64(t.P99)}} {
		switch {
		case f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) || (f.v == 0 && d.isSet(q+".target."+f.name)):
			d.errField(q+".target."+f.name, "must be positive")
			set++ // one error is enough
		case f.v > 0:
			set++
		}
	}
	switch {
	case set == 0:
		d.errField(q, "target is required: one of rps, inflight or p99, the load one replica should carry")
	case set > 1:
		d.errField(q+".target", "set one of rps, inflight or p99 (the load one replica should carry), not several")
	}
	if a.ScaleDownAfter < 0 || (a.ScaleDownAfter == 0 && d.isSet(q+".scaleDownAfter")) {
		d.errField(q+".scaleDownAfter", fmt.Sprintf("must be positive, got %s", time.Duration(a.ScaleDownAfter)))
	}
}

func (d *decoder) inference(s *InferenceServiceSpec, p string) {
	d.model(&s.Model, p+".model")
	switch {
	case s.Replicas < 0 || (s.Replicas == 0 && d.isSet(p+".replicas")):
		msg := fmt.Sprintf("must be at least 1, got %d", s.Replicas)
		if s.PerClientSite {
			msg += " (with perClientSite it counts replicas per client site)"
		} else {
			msg += " (or set perClientSite: true for one per client site)"
		}
		d.errField(p+".replicas", msg)
	case s.Replicas > MaxReplicas:
		d.errField(p+".replicas", fmt.Sprintf("%d replicas is more than the %d supported", s.Replicas, MaxReplicas))
	}
	if a := s.Autoscale; a != nil {
		d.autoscale(s, p)
	}
	d.resources(&s.Resources, p+".resources")
	if l := s.Latency; l != nil {
		switch p99 := time.Duration(l.P99); {
		case p99 <= 0:
			d.errField(p+".latency.p99", "must be a positive duration such as 20ms")
		case p99 > MaxLatency:
			d.errField(p+".latency.p99", fmt.Sprintf("%s is not a latency SLO: at most %s", p99, MaxLatency))
		}
		if len(l.Clients) == 0 {
			d.errField(p+".latency.clients", "name the client sites or regions the SLO is measured from")
		}
		d.names(l.Clients, p+".latency.clients", "client site or region")
	}
	if s.PerClientSite && (s.Latency == nil || len(s.Latency.Clients) == 0) {
		d.errField(p+".perClientSite", "needs latency.clients: the client sites to serve")
	}
	d.tiers(s.Tiers, p+".tiers")
	if s.Warm && !s.Prestage {
		d.errField(p+".warm", "needs prestage: true: a standby loads only the model it holds")
	}
	if b := s.Burst; b != nil {
		q := p + ".burst"
		switch {
		case b.Tiers == nil:
			d.errField(q, "tiers is required: the tiers that take the overflow")
		default:
			d.tiers(b.Tiers, q+".tiers")
		}
		if b.MaxExtraLatency < 0 {
			d.errField(q+".maxExtraLatency", fmt.Sprintf("must not be negative, got %s", time.Duration(b.MaxExtraLatency)))
		}
		if b.ScaleDownAfter < 0 || (b.ScaleDownAfter == 0 && d.isSet(q+".scaleDownAfter")) {
			d.errField(q+".scaleDownAfter", fmt.Sprintf("must be positive, got %s", time.Duration(b.ScaleDownAfter)))
		}
		if s.Latency == nil {
			d.errField(q, "needs latency: without an SLO, tiers already take what the first cannot hold")
		}
	}
	switch s.Spread {
	case "", SpreadSite, SpreadRegion:
	default:
		d.errField(p+".spread", fmt.Sprintf("%q is not a spread domain: use site or region", s.Spread))
	}
	d.exprs(s.Constraints, s.Affinities, p)
	if r := s.Rollout; r != nil {
		switch r.Strategy {
		case "", RolloutCanary, RolloutAll:
		default:
			d.errField(p+".rollout.strategy", fmt.Sprintf("%q is not a strategy: use canary or all", r.Strategy))
		}
		if r.CanaryRequests < 0 || (r.CanaryRequests == 0 && d.isSet(p+".rollout.canaryRequests")) {
			d.errField(p+".rollout.canaryRequests", fmt.Sprintf("must be at least 1, got %d", r.CanaryRequests))
		}
		if r.Strategy == RolloutAll && r.CanaryRequests != 0 {
			d.errField(p+".rollout.canaryRequests", "only the canary strategy takes canaryRequests")
		}
		if r.CanaryTimeout < 0 || (r.CanaryTimeout == 0 && d.isSet(p+".rollout.canaryTimeout")) {
			d.errField(p+".rollout.canaryTimeout", fmt.Sprintf("must be positive, got %s", time.Duration(r.CanaryTimeout)))
		}
		if r.Strategy == RolloutAll && r.CanaryTimeout != 0 {
			d.errField(p+".rollout.canaryTimeout", "only the canary strategy takes canaryTimeout")
		}
		if !(r.MaxErrorRate >= 0 && r.MaxErrorRate <= 1) {
			d.errField(p+".rollout.maxErrorRate", fmt.Sprintf("%g is not a rate: want 0 to 1", r.MaxErrorRate))
		}
	}
	if dr := s.Drift; dr != nil {
		switch dr.Detector {
		case "", DetectorPSI, DetectorKS, DetectorWasserstein:
		default:
			d.errField(p+".drift.detector", fmt.Sprintf("%q is not a detector: use psi, ks or wasserstein", dr.Detector))
		}
		switch {
		case dr.Threshold < 0 || math.IsNaN(dr.Threshold) || (dr.Threshold == 0 && d.isSet(p+".drift.threshold")):
			d.errField(p+".drift.threshold", fmt.Sprintf("must be positive, got %g", dr.Threshold))
		case dr.Detector == DetectorKS && dr.Threshold >= 1:
			d.errField(p+".drift.threshold", fmt.Sprintf("the ks threshold is a p-value: want less than 1, got %g", dr.Threshold))
		}
		if dr.Window < 0 || (dr.Window < MinDriftWindow && (dr.Window != 0 || d.isSet(p+".drift.window"))) {
			d.errField(p+".drift.window", fmt.Sprintf("%d samples is too few to compare distributions: at least %d", dr.Window, MinDriftWindow))
		}
		switch dr.Reference {
		case "", ReferenceTraining, ReferenceFirst:
		default:
			d.errField(p+".drift.reference", fmt.Sprintf("%q is not a reference: use training or first", dr.Reference))
		}
		d.names(dr.Features, p+".drift.features", "feature")
		if st := dr.Stream; st != nil {
			if st.FalseAlarmEvery < 0 || (st.FalseAlarmEvery < 10 && (st.FalseAlarmEvery != 0 || d.isSet(p+".drift.stream.falseAlarmEvery"))) {
				d.errField(p+".drift.stream.falseAlarmEvery", fmt.Sprintf("%d rows: want at least 10 rows between false alarms", st.FalseAlarmEvery))
			}
			if st.Shift < 0 || st.Shift > 10 || math.IsNaN(st.Shift) || (st.Shift == 0 && d.isSet(p+".drift.stream.shift")) {
				d.errField(p+".drift.stream.shift", fmt.Sprintf("%g: want a shift in standard deviations above 0, at most 10", st.Shift))
			}
		}
	}
	if s.Retrain != nil {
		d.training(s.Retrain, p+".retrain")
	}
}

func (d *decoder) model(m *ModelRef, p string) {
	switch {
	case m.Name == "" && m.Digest == "":
		d.errField(p, "name a model: {name: NAME, version: V} or {digest: sha256:...}")
	case m.Name == "" && m.Version != "":
		d.errField(p+".version", "a version needs the model's name")
	}
	if m.Name != "" && !modelRE.MatchString(m.Name) {
		d.errField(p+".name", fmt.Sprintf("%q is not a model name: letters, digits, '-', '_' and '.'", m.Name))
	}
	if m.Version != "" && !modelRE.MatchString(m.Version) {
		d.errField(p+".version", fmt.Sprintf("%q is not a version: letters, digits, '-', '_' and '.'", m.Version))
	}
	if m.Digest != "" && !digestRE.MatchString(m.Digest) {
		d.errField(p+".digest", fmt.Sprintf("%q is not a digest: want sha256: and 64 lower-case hex digits", m.Digest))
	}
}

func (d *decoder) training(s *TrainingJobSpec, p string) {
	d.resources(&s.Resources, p+".resources")
	if s.Sweep != nil {
		if strings.HasSuffix(p, ".retrain") {
			d.errField(p+".sweep", "not yet: a retrain cannot be a sweep; sweep a TrainingJob")
		} else {
			d.sweep(s, p+".sweep")
		}
	}
	d.gang(s, p+".gang")
	d.dataRefs(s.Data, p, s.launcher())
	d.codeRef(s, p)
	d.capture(s, p)
	launcher := s.launcher()
	switch launcher {
	case LauncherExec, LauncherTorchrun:
		if len(s.Command) == 0 {
			at := p + ".command"
			if d.isSet(p + ".launcher") {
				at = p + ".launcher" // point at what asked for one
			}
			what := "a command"
			if launcher == LauncherTorchrun {
				what = "a command: the training script torchrun runs"
			}
			d.errAt(d.at(at), p+".command", fmt.Sprintf("the %s launcher needs %s", launcher, what))
		}
		if s.Builtin != nil {
			d.errField(p+".builtin", "only the builtin launcher takes builtin settings")
		}
	case LauncherBuiltin:
		if len(s.Command) > 0 {
			d.errField(p+".command", "the builtin launcher runs no command: set launcher: exec")
		}
		if len(s.Args) > 0 {
			d.errField(p+".args", "the builtin launcher takes no args: set launcher: exec")
		}
		d.builtinSettings(s.Builtin, p+".builtin")
	default:
		d.errField(p+".launcher", fmt.Sprintf("%q is not a launcher: use exec, torchrun or builtin", s.Launcher))
	}
	for _, k := range sortedKeys(s.Env) {
		if !envRE.MatchString(k) {
			d.errAt(d.at(p+".env."+k+keySuffix), p+".env."+k, fmt.Sprintf("%q is not an environment variable name: letters, digits and '_', not starting with a digit", k))
		}
	}
	if s.MaxDuration < 0 || (s.MaxDuration == 0 && d.isSet(p+".maxDuration")) {
		d.errField(p+".maxDuration", "must be a positive duration such as 2h")
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		d.errField(p+".retries", fmt.Sprintf("want 0 to %d, got %d", MaxRetries, s.Retries))
	}
	d.tiers(s.Tiers, p+".tiers")
	d.exprs(s.Constraints, s.Affinities, p)
}

// gang checks a TrainingJob's gang (p is its path, spec.gang).
func (d *decoder) gang(s *TrainingJobSpec, p string) {
	g := &s.Gang
	switch {
	case g.Nodes < 0 || (g.Nodes == 0 && d.isSet(p+".nodes")):
		d.errField(p+".nodes", fmt.Sprintf("must be at least 1, got %d", g.Nodes))
	case g.Nodes == 0 && d.isSet(p+".gpusPerNode"):
		d.errField(p+".nodes", "gpusPerNode needs nodes: how many nodes the gang spans")
	case g.Nodes > MaxGangNodes:
		d.errField(p+".nodes", fmt.Sprintf("%d nodes is more than the %d supported", g.Nodes, MaxGangNodes))
	}
	switch {
	case g.GPUsPerNode < 0:
		d.errField(p+".gpusPerNode", fmt.Sprintf("must not be negative, got %d", g.GPUsPerNode))
	case g.GPUsPerNode > MaxGPUsPerNode:
		d.errField(p+".gpusPerNode", fmt.Sprintf("%d GPUs on one node is more than any node has (%d)", g.GPUsPerNode, MaxGPUsPerNode))
	case g.GPUsPerNode > 0 && s.Resources.GPUs != nil && g.GPUsPerNode != s.Resources.GPUs.Count:
		d.errField(p+".gpusPerNode", fmt.Sprintf("%d disagrees with resources.gpus.count %d: set one of them", g.GPUsPerNode, s.Resources.GPUs.Count))
	}
	switch {
	case g.RanksPerNode < 0 || g.RanksPerNode > MaxRanksPerNode || (g.RanksPerNode == 0 && d.isSet(p+".ranksPerNode")):
		d.errField(p+".ranksPerNode", fmt.Sprintf("want 1 to %d, got %d", MaxRanksPerNode, g.RanksPerNode))
	case g.RanksPerNode > 1 && s.launcher() == LauncherBuiltin:
		d.errField(p+".ranksPerNode", "the builtin trainer runs one rank: use launcher exec or torchrun")
	case g.RanksPerNode > 1 && g.GPUsPerNode > 0 && g.GPUsPerNode%g.RanksPerNode != 0:
		d.errField(p+".ranksPerNode", fmt.Sprintf("%d GPUs per node cannot be shared evenly among %d ranks", g.GPUsPerNode, g.RanksPerNode))
	}
	switch g.Fabric {
	case "", FabricSame, FabricAny:
	default:
		d.errField(p+".fabric", fmt.Sprintf("%q is not a fabric rule: use same (one RDMA fabric) or any", g.Fabric))
	}
}

// capture checks a retrain's capture block (p is the TrainingJob spec's
// path).
func (d *decoder) capture(s *TrainingJobSpec, p string) {
	c := s.Capture
	if c == nil {
		return
	}
	p += ".capture"
	if !strings.HasSuffix(p, ".retrain.capture") {
		d.errField(p, "only an InferenceService's retrain captures live data: it needs a drift alarm")
		return
	}
	if c.Rows < 0 || c.Rows > MaxCaptureRows || (c.Rows == 0 && d.isSet(p+".rows")) {
		d.errField(p+".rows", fmt.Sprintf("want 1 to %d labelled rows, got %d", MaxCaptureRows, c.Rows))
	}
	if c.Mix < 0 || c.Mix > 0.9 || math.IsNaN(c.Mix) {
		d.errField(p+".mix", fmt.Sprintf("%g: want a fraction of the training rows from 0 to 0.9", c.Mix))
	}
	if c.Timeout < 0 || (c.Timeout == 0 && d.isSet(p+".timeout")) {
		d.errField(p+".timeout", "must be a positive duration such as 30m")
	}
	switch {
	case c.Source != "" && c.Source != CaptureFeedback && c.Source != CaptureInputs:
		d.errField(p+".source", fmt.Sprintf("%q is not a capture source: use feedback (ground truth clients post) or inputs (the live inputs, unlabelled)", c.Source))
	case c.Source == CaptureInputs && s.launcher() == LauncherBuiltin:
		d.errField(p+".source", "the builtin trainer needs labels: capture feedback, or train the unlabelled inputs with launcher exec or torchrun")
	case s.launcher() == LauncherBuiltin && (s.Builtin == nil || s.Builtin.Label == ""):
		d.errField(p, "the builtin trainer needs builtin.label: the captured rows' ground truth is written under it")
	}
}

// dataRefs checks a TrainingJob's data references.
func (d *decoder) dataRefs(refs []DataRef, p, launcher string) {
	mix := 0.0
	for i, ref := range refs {
		f := fmt.Sprintf("%s.data[%d]", p, i)
		switch {
		case (ref.Dataset == "") == (ref.Artifact == ""):
			d.errField(f, "set exactly one of dataset and artifact")
		case ref.Dataset != "" && !datasetRE.MatchString(ref.Dataset):
			d.errField(f+".dataset", fmt.Sprintf("%q is not a dataset: want name or name:version", ref.Dataset))
		case ref.Artifact != "" && !digestRE.MatchString(ref.Artifact):
			d.errField(f+".artifact", fmt.Sprintf("%q is not a digest: want sha256: and 64 lower-case hex digits", ref.Artifact))
		}
		if ref.Size < 0 {
			d.errField(f+".size", "must not be negative")
		}
		switch {
		case ref.Mix < 0 || ref.Mix > 0.9 || math.IsNaN(ref.Mix):
			d.errField(f+".mix", fmt.Sprintf("%g: want a fraction of the training rows from 0 to 0.9", ref.Mix))
		case ref.Mix > 0 && launcher != LauncherBuiltin:
			d.errField(f+".mix", "only the builtin trainer mixes datasets: an exec job reads $STRATA_DATASET_DIR itself")
		}
		mix += ref.Mix
	}
	if mix > 0.9 {
		d.errField(p+".data", fmt.Sprintf("the datasets' mix adds up to %g: leave at least 0.1 of the rows to the others", mix))
	}
}

// codeRef checks a TrainingJob's code artifact.
func (d *decoder) codeRef(s *TrainingJobSpec, p string) {
	switch {
	case s.Code == "":
	case s.launcher() == LauncherBuiltin:
		d.errField(p+".code", "the builtin trainer runs no code: set launcher: exec or torchrun")
	case strings.HasPrefix(s.Code, "sha256:") && !digestRE.MatchString(s.Code),
		!strings.HasPrefix(s.Code, "sha256:") && !datasetRE.MatchString(s.Code):
		d.errField(p+".code", fmt.Sprintf("%q is not a code artifact: want name, name:version or sha256:digest", s.Code))
	}
}

// builtinSettings checks the builtin trainer's settings, if any (p is
// their path).
func (d *decoder) builtinSettings(b *Builtin, p string) {
	if b == nil {
		return
	}
	switch b.Algorithm {
	case "", AlgorithmLogReg, AlgorithmMLP:
	default:
		d.errField(p+".algorithm", fmt.Sprintf("%q is not an algorithm: use logreg or mlp", b.Algorithm))
	}
	if b.Algorithm == AlgorithmLogReg && len(b.Hidden) > 0 {
		d.errField(p+".hidden", "logreg has no hidden layers: set algorithm: mlp")
	}
	for i, h := range b.Hidden {
		if h < 1 || h > 4096 {
			d.errField(fmt.Sprintf("%s.hidden[%d]", p, i), fmt.Sprintf("layer size %d: want 1 to 4096", h))
		}
	}
	if b.Epochs < 0 || b.Epochs > 100000 || (b.Epochs == 0 && d.isSet(p+".epochs")) {
		d.errField(p+".epochs", fmt.Sprintf("want 1 to 100000, got %d", b.Epochs))
	}
	if !(b.LearningRate >= 0 && b.LearningRate <= 10) || (b.LearningRate == 0 && d.isSet(p+".learningRate")) {
		d.errField(p+".learningRate", fmt.Sprintf("want a positive rate up to 10, got %g", b.LearningRate))
	}
	if !(b.Holdout >= 0 && b.Holdout <= 0.9) {
		d.errField(p+".holdout", fmt.Sprintf("want a fraction of the rows from 0 to 0.9, got %g", b.Holdout))
	}
}

func (d *decoder) resources(r *Resources, p string) {
	if r.CPU < 0 {
		d.errField(p+".cpu", "must not be negative")
	}
	if r.Memory < 0 {
		d.errField(p+".memory", "must not be negative")
	}
	if g := r.GPUs; g != nil {
		if g.Count < 1 || g.Count > MaxGPUsPerNode {
			d.errField(p+".gpus.count", fmt.Sprintf("want 1 to %d when gpus is set, got %d", MaxGPUsPerNode, g.Count))
		}
		if g.Memory < 0 {
			d.errField(p+".gpus.memory", "must not be negative")
		}
	}
}

// tiers checks a tier list; nil means the default.
func (d *decoder) tiers(ts []string, p string) {
	if ts != nil && len(ts) == 0 {
		d.errField(p, "name at least one tier, or leave tiers out for the default")
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
}

// names checks a list of names: none empty, none twice.
func (d *decoder) names(ns []string, p, what string) {
	seen := map[string]bool{}
	for i, n := range ns {
		f := fmt.Sprintf("%s[%d]", p, i)
		if strings.TrimSpace(n) == "" {
			d.errField(f, fmt.Sprintf("empty %s name", what))
		}
		if seen[n] {
			d.errField(f, fmt.Sprintf("%s %q is listed twice", what, n))
		}
		seen[n] = true
	}
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
		if w := affs[i].Weight; !(w >= 0) || math.IsInf(w, 0) {
			d.errField(f+".weight", fmt.Sprintf("must be a finite number, 0 or more, got %g", w))
		}
	}
}

// compile compiles x in place unless it already is; a CEL error is
// reported at its own line and column in the file when they can be told.
func (d *decoder) compile(x *Expr, field string, numeric bool) {
	if x == nil {
		d.errField(field, "empty expression")
		return
	}
	if x.Compiled() {
		if !numeric && !x.out.IsExactType(boolType) {
			d.errField(field, fmt.Sprintf("CEL: expression has type %s: a constraint must be bool", x.out))
		}
		return
	}
	c, err := compileExpr(x.src, numeric)
	if err != nil {
		at := x.pos
		if at == (Position{}) {
			at = d.at(field)
		}
		var ce *celError
		if errors.As(err, &ce) && ce.line > 0 && x.pos != (Position{}) {
			at = x.position(ce.line, ce.col)
		}
		msg := strings.Join(strings.Fields(err.Error()), " ")
		if i := strings.Index(msg, " expecting {"); i >= 0 && len(msg)-i > 40 {
			msg = msg[:i] // the parser's list of every token it could take
		}
		d.errAt(at, field, "CEL: "+msg)
		return
	}
	x.prog, x.out = c.prog, c.out
}

package drift

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Config tunes a Monitor. The zero value (with a reference) is valid and
// means the documented defaults.
type Config struct {
	// Model, Version and Site label the events.
	Model   string `json:"model,omitempty"`
	Version string `json:"version,omitempty"`
	Site    string `json:"site,omitempty"`
	// Detector is the statistic compared with the thresholds. Default
	// DetectorKS, the most sensitive of the three to shifts in location
	// and scale at the default window.
	Detector Detector `json:"detector,omitempty"`
	// Window is the number of most recent samples in the live window.
	// Default 500. Larger windows detect smaller shifts but later.
	Window int `json:"window,omitempty"`
	// Every is the evaluation cadence in samples once the window is full.
	// Default 100. An evaluation sorts the window (O(W log W) per
	// feature), so the cost per sample falls with a longer cadence and
	// the detection delay grows by up to one cadence.
	Every int `json:"every,omitempty"`
	// Alarm is the threshold an evaluation must cross for a feature to
	// count as drifted: for DetectorKS a corrected p-value at or below
	// Alarm (default 0.001); for DetectorPSI a PSI at or above it
	// (default 0.25); for DetectorWasserstein a distance, in reference
	// standard deviations, at or above it (default 0.3).
	Alarm float64 `json:"alarm,omitempty"`
	// Clear is the lower (hysteresis) threshold: an alarm clears at the
	// first evaluation where every feature is on the safe side of Clear:
	// KS p-values above it (default 0.05), PSI below it (default 0.1),
	// Wasserstein below it (default 0.15).
	Clear float64 `json:"clear,omitempty"`
	// Consecutive is K: the monitor alarms after K consecutive
	// evaluations with at least one drifted feature. Default 3.
	Consecutive int `json:"consecutive,omitempty"`
	// Correction is applied to KS p-values across features (and the
	// prediction) in each evaluation. Default BenjaminiHochberg. PSI and
	// Wasserstein are effect sizes with fixed thresholds, not tests, and
	// are not corrected.
	Correction Correction `json:"correction,omitempty"`
	// Prediction makes the monitor also watch the model's score, passed
	// as one extra value at the end of each row; the reference must
	// carry a Prediction summary.
	Prediction bool `json:"prediction,omitempty"`
	// Stream, when set, also runs the streaming detector (a two-sided
	// CUSUM per feature and the prediction, see CUSUM) on every row: a
	// streaming alarm on any feature raises the monitor's alarm at once,
	// with an Event whose Source is SourceStream.
	//
	// An alarm is cleared only by the detector that raised it, and not
	// while the other still sees drift: a streaming alarm at the first
	// row where no feature's CUSUM is Holding (the evidence of every side
	// that alarmed has decayed back to 0) and the latest evaluation, if
	// any, is not Over; a windowed alarm at an evaluation that is Under
	// with no streaming alarm since the previous one and none Holding. A
	// drift the window cannot see (a minority of rows from another class)
	// so holds the streaming alarm instead of the window clearing it at
	// its next evaluation. Nil: the windowed detector alone.
	Stream *StreamConfig `json:"stream,omitempty"`
}

// Config defaults.
const (
	DefaultWindow      = 500
	DefaultEvery       = 100
	DefaultConsecutive = 3
)

// DefaultThresholds returns the (alarm, clear) thresholds of a detector.
func DefaultThresholds(d Detector) (alarm, clear float64) {
	switch d {
	case DetectorPSI:
		return 0.25, 0.1
	case DetectorWasserstein:
		return 0.3, 0.15
	default:
		return 0.001, 0.05
	}
}

// EnsureDefaults fills zero fields with their documented defaults.
func (c *Config) EnsureDefaults() {
	if c.Detector == "" {
		c.Detector = DetectorKS
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	a, cl := DefaultThresholds(c.Detector)
	if c.Alarm == 0 {
		c.Alarm = a
	}
	if c.Clear == 0 {
		c.Clear = cl
	}
	if c.Consecutive == 0 {
		c.Consecutive = DefaultConsecutive
	}
	if c.Correction == "" {
		c.Correction = BenjaminiHochberg
	}
	if c.Stream != nil {
		s := *c.Stream
		s.EnsureDefaults()
		c.Stream = &s
	}
}

// Validate reports every problem with c (after EnsureDefaults) joined into
// one error wrapping ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	switch c.Detector {
	case DetectorPSI, DetectorKS, DetectorWasserstein:
	default:
		errs = append(errs, fmt.Errorf("detector %q: want psi, ks or wasserstein", c.Detector))
	}
	if c.Window < 2 || c.Every < 1 || c.Consecutive < 1 {
		errs = append(errs, fmt.Errorf("window %d, every %d, consecutive %d: need window ≥ 2 and the others ≥ 1", c.Window, c.Every, c.Consecutive))
	}
	switch {
	case c.Detector == DetectorKS && !(c.Alarm > 0 && c.Alarm < c.Clear && c.Clear <= 1):
		errs = append(errs, fmt.Errorf("ks thresholds: need 0 < alarm (%v) < clear (%v) ≤ 1 (they are p-values)", c.Alarm, c.Clear))
	case c.Detector != DetectorKS && !(c.Clear > 0 && c.Clear < c.Alarm):
		errs = append(errs, fmt.Errorf("%s thresholds: need 0 < clear (%v) < alarm (%v)", c.Detector, c.Clear, c.Alarm))
	}
	switch c.Correction {
	case BenjaminiHochberg, Bonferroni, NoCorrection:
	default:
		errs = append(errs, fmt.Errorf("correction %q: want bh, bonferroni or none", c.Correction))
	}
	if c.Stream != nil {
		if err := c.Stream.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Score is one feature's result in one evaluation.
type Score struct {
	// Name is the feature's name ("prediction" for the score).
	Name string `json:"name"`
	// Statistic is PSI, the KS D, or the Wasserstein-1 distance in
	// reference standard deviations, per the detector.
	Statistic float64 `json:"statistic"`
	// PValue is the corrected KS p-value (KS only; 1 otherwise).
	PValue float64 `json:"p_value"`
	// Drifted says the feature crossed the alarm threshold.
	Drifted bool `json:"drifted"`
}

// Evaluation is the result of comparing the live window with the reference.
type Evaluation struct {
	// Seen is the number of samples observed when it ran.
	Seen int64 `json:"seen"`
	// Scores are per feature, in reference order, then the prediction.
	Scores []Score `json:"scores"`
	// Over says at least one feature drifted.
	Over bool `json:"over"`
	// Under says every feature is on the safe side of the clear threshold.
	Under bool `json:"under"`
}

// EventKind says whether an Event raises or clears an alarm.
type EventKind string

// Event kinds.
const (
	EventAlarm EventKind = "alarm"
	EventClear EventKind = "clear"
)

// Source says which detector raised an Event.
type Source string

// Sources.
const (
	// SourceWindow is the windowed detector (Config.Detector) after
	// Config.Consecutive evaluations over the alarm threshold, and the
	// clear of an alarm it raised.
	SourceWindow Source = "window"
	// SourceStream is the streaming detector (Config.Stream) on one row,
	// and the clear of an alarm it raised.
	SourceStream Source = "stream"
)

// Event is emitted when the monitor starts or stops alarming.
type Event struct {
	// Kind is EventAlarm or EventClear.
	Kind EventKind `json:"kind"`
	// Source says which detector raised it: for EventClear, the one that
	// raised the alarm it clears (no other clears it).
	Source Source `json:"source,omitempty"`
	// Model, Version and Site are copied from the Config.
	Model   string `json:"model,omitempty"`
	Version string `json:"version,omitempty"`
	Site    string `json:"site,omitempty"`
	// Detector produced the scores.
	Detector Detector `json:"detector"`
	// Scores are the evaluation's per-feature scores: for SourceStream,
	// the latest evaluation's (nil before the first).
	Scores []Score `json:"scores"`
	// Stream is the streaming detector's per-feature state when the event
	// fired (Drifted marks the features that alarmed); nil without
	// Config.Stream.
	Stream []StreamScore `json:"stream,omitempty"`
	// Samples is the number of samples seen when it fired.
	Samples int64 `json:"samples"`
}

// Monitor watches one model version: it keeps a sliding window of the most
// recent rows, evaluates the detector every Config.Every samples once the
// window is full, and applies hysteresis. It does no I/O and keeps no
// clock. A Monitor is not safe for concurrent use; callers serialise.
type Monitor struct {
	cfg  Config
	cols []FeatureReference // features, then the prediction
	// scores says the prediction is a score in [0, 1], compared at
	// ScoreResolution (see clampScores).
	scores bool

	ring        []float64   // column-major: ring[c*Window+slot]
	sorted      [][]float64 // per column, the window's values in order
	next        int
	filled      int
	seen        int64
	since       int
	consecutive int
	alarmed     bool
	source      Source // of the alarm, while alarmed
	judged      bool
	last        *Evaluation

	cusum      []*CUSUM // per column; nil without Config.Stream
	streamHit  []bool   // per column: alarmed since the last evaluation
	streamHits int      // streaming alarms since the last evaluation

	ps, adj []float64
	idx     []int
}

// New returns a Monitor comparing live rows with ref. Errors wrap
// ErrInvalid.
func New(ref Reference, cfg Config) (*Monitor, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cols := append([]FeatureReference(nil), ref.Features...)
	if cfg.Prediction {
		if ref.Prediction == nil {
			return nil, fmt.Errorf("%w: Prediction set but the reference has no prediction summary", ErrInvalid)
		}
		p := *ref.Prediction
		if p.Min >= 0 && p.Max <= 1 {
			p = clampScores(p)
		}
		cols = append(cols, p)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: reference has no features", ErrInvalid)
	}
	var err error
	var errs []error
	for _, c := range cols {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &Monitor{
		cfg: cfg, cols: cols, scores: cfg.Prediction && ref.Prediction.Min >= 0 && ref.Prediction.Max <= 1,
		ring:   make([]float64, len(cols)*cfg.Window),
		sorted: make([][]float64, len(cols)),
		ps:     make([]float64, len(cols)),
		adj:    make([]float64, len(cols)),
		idx:    make([]int, len(cols)),
	}
	for c := range m.sorted {
		m.sorted[c] = make([]float64, 0, cfg.Window)
	}
	if cfg.Stream != nil {
		// The input features only: the prediction is a function of them,
		// often a class, and a per-row CUSUM on it alarms on a harmless
		// change in the class mix; the windowed detectors watch it.
		n := len(cols)
		if cfg.Prediction {
			n--
		}
		m.cusum = make([]*CUSUM, n)
		m.streamHit = make([]bool, n)
		for c, ref := range cols[:n] {
			if m.cusum[c], err = NewCUSUM(ref, *cfg.Stream, n); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Config returns the monitor's configuration with defaults filled.
func (m *Monitor) Config() Config { return m.cfg }

// Width is the number of values Observe expects per row: the features, plus
// one for the prediction when Config.Prediction is set.
func (m *Monitor) Width() int { return len(m.cols) }

// Seen returns the number of rows observed.
func (m *Monitor) Seen() int64 { return m.seen }

// Alarmed says whether the monitor is in the alarm state.
func (m *Monitor) Alarmed() bool { return m.alarmed }

// Source says which detector raised the current alarm ("" when not
// alarmed): only it clears the alarm.
func (m *Monitor) Source() Source {
	if !m.alarmed {
		return ""
	}
	return m.source
}

// Judged says whether the monitor has seen enough rows to judge: it has
// alarmed, or an evaluation of a full window found no feature drifted.
// Before that a monitor is warming up: no alarm does not yet mean no drift
// (the windowed detector needs Config.Consecutive drifted evaluations to
// alarm, the first after Config.Window rows).
func (m *Monitor) Judged() bool { return m.judged }

// Last returns a copy of the latest evaluation, if any.
func (m *Monitor) Last() (Evaluation, bool) {
	if m.last == nil {
		return Evaluation{}, false
	}
	e := *m.last
	e.Scores = slices.Clone(e.Scores)
	return e, true
}

// Stream returns the streaming detector's per-feature state, in the order
// of Scores (the input features; the prediction has none); nil without
// Config.Stream.
func (m *Monitor) Stream() []StreamScore {
	if m.cusum == nil {
		return nil
	}
	out := make([]StreamScore, len(m.cusum))
	for c, d := range m.cusum {
		out[c] = StreamScore{
			Name: m.cols[c].Name, Upper: d.upper, Lower: d.lower, Threshold: d.h,
			Spread: d.spread, SpreadThreshold: d.hs,
			Alarms: d.alarms, LastAlarm: d.lastAlarm, Side: d.side, Drifted: m.streamHit[c],
			AlarmStatistic: d.crossed, Holding: d.Holding(),
		}
	}
	return out
}

// Observe adds one row (Width values, the prediction last when watched).
// It returns an Event when this row's evaluation raises or clears the
// alarm, and nil otherwise. A row of the wrong width or with a NaN or
// infinite value is rejected with an error wrapping ErrInvalid and not
// counted.
func (m *Monitor) Observe(row []float64) (*Event, error) { return observe(m, row) }

// ObserveFloat32 is Observe for a float32 row, as the inference path holds
// its tensors; it does not allocate.
func (m *Monitor) ObserveFloat32(row []float32) (*Event, error) { return observe(m, row) }

func observe[T float32 | float64](m *Monitor, row []T) (*Event, error) {
	if len(row) != len(m.cols) {
		return nil, fmt.Errorf("%w: row has %d values, want %d", ErrInvalid, len(row), len(m.cols))
	}
	for i, v := range row {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %s = %v", ErrInvalid, m.cols[i].Name, f)
		}
	}
	w := m.cfg.Window
	for c, x := range row {
		v := float64(x)
		if m.scores && c == len(row)-1 {
			v = min(max(v, ScoreResolution), 1-ScoreResolution)
		}
		slot := c*w + m.next
		if m.filled == w {
			replaceSorted(m.sorted[c], m.ring[slot], v)
		} else {
			m.sorted[c] = insertSorted(m.sorted[c], v)
		}
		m.ring[slot] = v
	}
	m.next = (m.next + 1) % w
	m.filled = min(m.filled+1, w)
	m.seen++
	m.since++
	var out *Event
	if m.cusum != nil {
		hit := false
		for c, d := range m.cusum {
			if d.Observe(float64(row[c])) {
				m.streamHit[c], hit = true, true
				m.streamHits++
			}
		}
		switch {
		case hit && !m.alarmed:
			m.alarmed, m.source, m.judged = true, SourceStream, true
			out = m.event(EventAlarm, SourceStream, m.last)
		case m.alarmed && m.source == SourceStream && !m.holding() && (m.last == nil || !m.last.Over):
			m.alarmed, m.consecutive = false, 0
			out = m.event(EventClear, SourceStream, m.last)
		}
	}
	if m.filled < w || m.since < m.cfg.Every {
		return out, nil
	}
	m.since = 0
	ev := m.Evaluate()
	if e := m.step(ev); e != nil {
		out = e
	}
	return out, nil
}

// step applies hysteresis to a new evaluation.
func (m *Monitor) step(ev Evaluation) *Event {
	if ev.Over {
		m.consecutive++
	} else {
		m.consecutive = 0
	}
	// Streaming alarms since the previous evaluation, and sides still
	// held, hold the alarm (the alarms are forgotten once this evaluation
	// has seen them).
	quiet := m.streamHits == 0 && !m.holding()
	if !ev.Over {
		m.judged = true
	}
	var out *Event
	switch {
	case !m.alarmed && m.consecutive >= m.cfg.Consecutive:
		m.alarmed, m.source, m.judged = true, SourceWindow, true
		out = m.event(EventAlarm, SourceWindow, &ev)
	case m.alarmed && m.source == SourceWindow && ev.Under && quiet:
		m.alarmed = false
		m.consecutive = 0
		out = m.event(EventClear, SourceWindow, &ev)
	}
	m.streamHits = 0
	clear(m.streamHit)
	return out
}

// holding says whether a streaming detector holds an alarm it raised.
func (m *Monitor) holding() bool {
	for _, d := range m.cusum {
		if d.Holding() {
			return true
		}
	}
	return false
}

// event builds an Event from ev (nil: no evaluation yet) and the streaming
// detector's state.
func (m *Monitor) event(k EventKind, src Source, ev *Evaluation) *Event {
	e := &Event{
		Kind: k, Source: src, Model: m.cfg.Model, Version: m.cfg.Version, Site: m.cfg.Site,
		Detector: m.cfg.Detector, Samples: m.seen, Stream: m.Stream(),
	}
	if ev != nil {
		e.Scores = slices.Clone(ev.Scores)
	}
	return e
}

// Evaluate compares the current live window (however full) with the
// reference, records it as the latest evaluation and returns it. It does not
// apply hysteresis; Observe does.
func (m *Monitor) Evaluate() Evaluation {
	ev := Evaluation{Seen: m.seen, Scores: make([]Score, len(m.cols)), Under: true}
	for c, ref := range m.cols {
		live := m.sorted[c]
		s := Score{Name: ref.Name, PValue: 1}
		switch m.cfg.Detector {
		case DetectorPSI:
			s.Statistic = psiSorted(ref, live)
		case DetectorWasserstein:
			s.Statistic = Wasserstein1(ref.Sample, live, ref.Std)
		case DetectorKS:
			s.Statistic, m.ps[c] = KS(ref.Sample, live)
		}
		ev.Scores[c] = s
	}
	if m.cfg.Detector == DetectorKS {
		adjustInto(m.cfg.Correction, m.ps, m.adj, m.idx)
		for c, p := range m.adj {
			ev.Scores[c].PValue = p
		}
	}
	for c := range ev.Scores {
		s := &ev.Scores[c]
		if m.cfg.Detector == DetectorKS {
			s.Drifted = s.PValue <= m.cfg.Alarm
			ev.Under = ev.Under && s.PValue > m.cfg.Clear
		} else {
			s.Drifted = s.Statistic >= m.cfg.Alarm
			ev.Under = ev.Under && s.Statistic < m.cfg.Clear
		}
		ev.Over = ev.Over || s.Drifted
	}
	m.last = &ev
	out := ev
	out.Scores = slices.Clone(ev.Scores)
	return out
}

// State is a Monitor's serialisable state (encoding/json), for persisting
// across agent restarts. The reference is not included: it travels with the
// model version.
type State struct {
	// Config is the monitor's configuration, defaults filled.
	Config Config `json:"config"`
	// Window holds each column's live values, oldest first.
	Window [][]float64 `json:"window"`
	// Seen counts rows observed.
	Seen int64 `json:"seen"`
	// SinceEval counts rows since the last evaluation.
	SinceEval int `json:"since_eval"`
	// Consecutive counts evaluations in a row with a drifted feature.
	Consecutive int `json:"consecutive"`
	// Alarmed is the hysteresis state; Source the detector that raised
	// the alarm (absent in states saved before it was kept: taken as
	// SourceWindow).
	Alarmed bool   `json:"alarmed"`
	Source  Source `json:"source,omitempty"`
	// Judged says the monitor has seen enough rows to judge (see
	// Monitor.Judged).
	Judged bool `json:"judged,omitempty"`
	// Last is the latest evaluation, if any.
	Last *Evaluation `json:"last,omitempty"`
	// Stream holds each column's streaming detector state; nil without
	// Config.Stream.
	Stream []StreamState `json:"stream,omitempty"`
	// StreamHits counts streaming alarms since the last evaluation.
	StreamHits int `json:"stream_hits,omitempty"`
}

// State returns a copy of the monitor's state.
func (m *Monitor) State() State {
	w := m.cfg.Window
	st := State{
		Config: m.cfg, Window: make([][]float64, len(m.cols)), Seen: m.seen,
		SinceEval: m.since, Consecutive: m.consecutive, Alarmed: m.alarmed,
		Source: m.Source(), Judged: m.judged,
	}
	start := 0
	if m.filled == w {
		start = m.next
	}
	for c := range m.cols {
		col := make([]float64, 0, m.filled)
		for k := 0; k < m.filled; k++ {
			col = append(col, m.ring[c*w+(start+k)%w])
		}
		st.Window[c] = col
	}
	if l, ok := m.Last(); ok {
		st.Last = &l
	}
	if m.cusum != nil {
		st.StreamHits = m.streamHits
		st.Stream = make([]StreamState, len(m.cusum))
		for c, d := range m.cusum {
			st.Stream[c] = StreamState{
				Upper: d.upper, Lower: d.lower, Alarms: d.alarms, LastAlarm: d.lastAlarm,
				Spread: d.spread, Side: d.side, Drifted: m.streamHit[c], Crossed: d.crossed,
			}
			if d.Holding() {
				st.Stream[c].Hold = d.hold[:]
			}
		}
	}
	return st
}

// Restore rebuilds a Monitor from ref and a State taken from a monitor over
// the same reference. Errors wrap ErrInvalid.
func Restore(ref Reference, st State) (*Monitor, error) {
	m, err := New(ref, st.Config)
	if err != nil {
		return nil, err
	}
	if len(st.Window) != len(m.cols) {
		return nil, fmt.Errorf("%w: state has %d columns, reference %d", ErrInvalid, len(st.Window), len(m.cols))
	}
	n := len(st.Window[0])
	w := m.cfg.Window
	for c, col := range st.Window {
		if len(col) != n || n > w {
			return nil, fmt.Errorf("%w: state window column %d has %d values (want %d, at most %d)", ErrInvalid, c, len(col), n, w)
		}
		copy(m.ring[c*w:], col)
		m.sorted[c] = append(m.sorted[c], col...)
		slices.Sort(m.sorted[c])
	}
	m.filled, m.next = n, n%w
	m.seen, m.since, m.consecutive, m.alarmed = st.Seen, st.SinceEval, st.Consecutive, st.Alarmed
	m.source = st.Source
	if m.alarmed && m.source == "" {
		m.source = SourceWindow
	}
	// A state saved before Judged was kept judged at its first
	// evaluation that was not over, or its alarm.
	m.judged = st.Judged || st.Alarmed || st.Last != nil && !st.Last.Over
	if st.Last != nil {
		l := *st.Last
		l.Scores = slices.Clone(l.Scores)
		m.last = &l
	}
	if m.cusum != nil {
		// A state saved without the streaming detector starts it afresh.
		if st.Stream != nil && len(st.Stream) != len(m.cusum) {
			return nil, fmt.Errorf("%w: state has %d streaming detectors, reference %d columns", ErrInvalid, len(st.Stream), len(m.cusum))
		}
		for c, s := range st.Stream {
			if !(s.Upper >= 0 && s.Lower >= 0 && s.Spread >= 0) || math.IsInf(s.Upper+s.Lower+s.Spread, 0) {
				return nil, fmt.Errorf("%w: streaming detector %d statistics %v, %v, %v", ErrInvalid, c, s.Upper, s.Lower, s.Spread)
			}
			d := m.cusum[c]
			d.upper, d.lower, d.spread, d.alarms, d.lastAlarm, d.side = s.Upper, s.Lower, s.Spread, s.Alarms, s.LastAlarm, s.Side
			d.crossed = s.Crossed
			if s.Hold != nil {
				if len(s.Hold) != len(d.hold) {
					return nil, fmt.Errorf("%w: streaming detector %d holds %d sides, want %d", ErrInvalid, c, len(s.Hold), len(d.hold))
				}
				for i, v := range s.Hold {
					if !(v >= 0) || math.IsInf(v, 0) {
						return nil, fmt.Errorf("%w: streaming detector %d held statistic %v", ErrInvalid, c, v)
					}
					d.hold[i] = v
				}
			}
			m.streamHit[c] = s.Drifted
		}
		m.streamHits = st.StreamHits
		for _, d := range m.cusum {
			d.seen = m.seen
		}
	}
	return m, nil
}

// insertSorted inserts v into the sorted slice s (which has spare capacity
// for it) while the window fills.
func insertSorted(s []float64, v float64) []float64 {
	i := lowerBound(s, v)
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// replaceSorted replaces one copy of old (which must be present) with v in
// the sorted slice s, keeping it sorted: two binary searches and one
// memmove of the values between the two positions. This keeps each
// column's window sorted for O(log W) plus a short move per sample, against
// O(W log W) to sort the window at every evaluation.
func replaceSorted(s []float64, old, v float64) {
	i := lowerBound(s, old)
	j := lowerBound(s, v)
	switch {
	case j > i:
		copy(s[i:j-1], s[i+1:j])
		s[j-1] = v
	default:
		copy(s[j+1:i+1], s[j:i])
		s[j] = v
	}
}

// lowerBound is the first index i with s[i] >= v (len(s) if none). Values
// are finite (Observe rejects NaN), so plain comparisons suffice.
func lowerBound(s []float64, v float64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// ScoreResolution is how finely a prediction that is a score in [0, 1]
// (a probability) is compared with its reference: scores below it count
// as it, and above 1 − it as 1 − it. Runtimes round a confident score
// differently: ONNX Runtime's float32 sigmoid gives exactly 0 below
// about 3e-8 and exactly 1 above 1 − 6e-8, where the Go trainer's own
// forward pass keeps 1e-22 and 0.99999999. Compared exactly, a confident
// model's live scores of exactly 0.0, against none in its reference, are
// a KS distance of their share on stable traffic, and a false alarm
// (TestScoresComparedAtAResolution).
const ScoreResolution = 1e-6

// clampScores returns f with its values clamped to [ScoreResolution,
// 1 − ScoreResolution]: its sample and range, and its bins, whose edges
// that meet at a bound merge (and an edge at the upper bound goes: every
// value is at most it).
func clampScores(f FeatureReference) FeatureReference {
	lo, hi := ScoreResolution, 1-ScoreResolution
	c := func(v float64) float64 { return min(max(v, lo), hi) }
	out := f
	out.Min, out.Max = c(f.Min), c(f.Max)
	out.Sample = make([]float64, len(f.Sample))
	for i, v := range f.Sample {
		out.Sample[i] = c(v)
	}
	if len(f.Proportions) != len(f.Edges)+1 {
		return out // Validate says why
	}
	out.Edges, out.Proportions = nil, nil
	acc := f.Proportions[0]
	for i, e := range f.Edges {
		ce := c(e)
		if n := len(out.Edges); n > 0 && ce <= out.Edges[n-1] {
			out.Proportions[n-1] += acc
		} else {
			out.Edges = append(out.Edges, ce)
			out.Proportions = append(out.Proportions, acc)
		}
		acc = f.Proportions[i+1]
	}
	if n := len(out.Edges); n > 0 && out.Edges[n-1] >= hi {
		acc += out.Proportions[n-1]
		out.Edges, out.Proportions = out.Edges[:n-1], out.Proportions[:n-1]
	}
	out.Proportions = append(out.Proportions, acc)
	return out
}

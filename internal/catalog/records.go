package catalog

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/policy"
)

// Placement states.
const (
	StatePending = "pending" // placed, waiting for the nodes to admit it
	StatePlaced  = "placed"  // every chosen node admitted it
	StateFailed  = "failed"  // no feasible placement now; retried
	StateDone    = "done"    // a training job ended; its nodes are free
	// StateLoading is what GET /v1/placements says of a placed service
	// whose model is not yet serving on every node (never stored).
	StateLoading = "loading"
)

// Policy is an applied policy as the mesh's catalog holds it.
type Policy struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Source is the YAML document as applied; every agent re-parses it.
	Source string `json:"source"`
	// File is the file name it was applied from, for error messages.
	File string `json:"file,omitempty"`
	// Generation counts applies that changed Source.
	Generation uint64    `json:"generation"`
	Applied    time.Time `json:"applied"`
	// AppliedAt is the agent that took the apply: a controller, which
	// alone writes policies.
	AppliedAt string `json:"applied_at"`
	// AppliedVia is the agent the apply was made at, when that agent
	// (not controller-capable) passed it to AppliedAt.
	AppliedVia string `json:"applied_via,omitempty"`
	// AppliedBy is the name of the API token that applied it; empty on
	// an API with no tokens (loopback only) and for the controllers' own
	// policies (retrains, trials).
	AppliedBy string `json:"applied_by,omitempty"`
	// Site is the site of that agent. In a federated mesh (a pool per
	// site) the policy is placed within this site: its controllers see
	// the other sites only as summaries.
	Site string `json:"site,omitempty"`
	// HandedFrom is set when no node of the site the policy was applied
	// in could take it and that site's controller handed it to Site, whose
	// summary showed room; it names the first site.
	HandedFrom string `json:"handed_from,omitempty"`
}

// Key is the policy's identity, "Kind/name".
func (p Policy) Key() string { return p.Kind + "/" + p.Name }

// Placement is where a policy's owner placed it.
type Placement struct {
	Key  string `json:"key"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Owner is the controller agent that placed it; Epoch counts
	// placements of this policy, so a stale owner's write is recognisable.
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	// Generation is the policy generation placed.
	Generation uint64 `json:"generation"`
	// State is pending, placed or failed.
	State string `json:"state"`
	// Nodes are the chosen nodes; Wanted how many the policy asks for.
	Nodes  []PlacedNode `json:"nodes"`
	Wanted int          `json:"wanted"`
	// Message says what happened in a line; Fallbacks and Rejected say why.
	Message   string            `json:"message,omitempty"`
	Fallbacks []Fallback        `json:"fallbacks,omitempty"`
	Rejected  map[Reason]int    `json:"rejected,omitempty"`
	Refused   map[string]string `json:"refused,omitempty"` // node → reason, nodes that refused earlier epochs
	Resources Resources         `json:"resources"`
	// Scale is an autoscaled service's replica count as its owner last
	// set it; nil for a fixed count.
	Scale   *Scale    `json:"scale,omitempty"`
	Updated time.Time `json:"updated"`
}

// Scale is an autoscaled service's replica count and the evidence for
// its last change.
type Scale struct {
	// Replicas is the count placed; From the count before the last
	// change (equal to it before any).
	Replicas int `json:"replicas"`
	From     int `json:"from"`
	// Sites is, for a service placed per client site, the count of each
	// client site; Replicas is their sum.
	Sites map[string]int `json:"sites,omitempty"`
	// Reason is the load that asked for the change; At is when.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Equal says whether s and o say the same; nil equals only nil.
func (s *Scale) Equal(o *Scale) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Replicas == o.Replicas && s.From == o.From && maps.Equal(s.Sites, o.Sites) && s.Reason == o.Reason && s.At.Equal(o.At)
}

// clone is p with its own slices and maps.
func (p Placement) clone() Placement {
	if p.Scale != nil {
		s := *p.Scale
		s.Sites = maps.Clone(s.Sites)
		p.Scale = &s
	}
	p.Nodes = slices.Clone(p.Nodes)
	p.Fallbacks = slices.Clone(p.Fallbacks)
	p.Rejected = maps.Clone(p.Rejected)
	p.Refused = maps.Clone(p.Refused)
	return p
}

// PlacedNode is one chosen node and whether it has admitted the work.
type PlacedNode struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Tier     string `json:"tier"`
	Site     string `json:"site"`
	Rank     int    `json:"rank"`
	Admitted bool   `json:"admitted"`
	// Client is the client site this replica serves, for a service
	// placed per client site.
	Client string `json:"client,omitempty"`
	// Replica is, for an inference service, what the node reports of its
	// model (GET /v1/placements fills it in): loading, serving or failed,
	// with Reason.
	Replica string `json:"replica,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Standby is, for a service that prestages its model, the node
	// placement would move this replica to if its node failed: it pulls
	// the model ahead of time.
	Standby string `json:"standby,omitempty"`
	// StandbyWarm says the standby has the replica's model loaded (a
	// policy's warm), as its node document lists it (GET /v1/placements
	// fills it in).
	StandbyWarm bool `json:"standby_warm,omitempty"`
	// Burst marks a replica placed on a burst tier, beyond the SLO by at
	// most the policy's maxExtraLatency, because the service's own tiers
	// had no room: it comes back when they have.
	Burst bool `json:"burst,omitempty"`
}

// Job states: trainer.State's values, which a Job's State and a rank's
// MemberStatus.State take.
const (
	JobPending   = "pending"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
)

// Job is one training job's run, as the catalog holds it (GET
// /v1/jobs).
type Job struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// Generation and Epoch are the policy generation and placement epoch
	// run; a job runs once per generation.
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
	State      string `json:"state"`
	Launcher   string `json:"launcher"`
	// Nodes are the gang's members by rank; Node runs rank 0 and keeps
	// the logs.
	Nodes []string `json:"nodes"`
	Node  string   `json:"node"`
	// RetrainOf is the InferenceService this job retrains, if any.
	RetrainOf string `json:"retrain_of,omitempty"`
	// Model and Version name the model the job registered; Digest its
	// bytes; Accuracy the trainer's holdout accuracy when known.
	Model    string  `json:"model,omitempty"`
	Version  string  `json:"version,omitempty"`
	Digest   string  `json:"digest,omitempty"`
	Accuracy float64 `json:"accuracy,omitempty"`
	// Metrics are the numbers the job reported in its metrics.json.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Invalid are the metrics.json numbers that were not finite (NaN,
	// Infinity, -Infinity, as Python writes them), by name: JSON has no
	// way to carry them in Metrics, and a trial whose objective is NaN
	// must say so rather than read as not reporting it.
	Invalid map[string]string `json:"invalid_metrics,omitempty"`
	// Steps are the metrics rank 0 reported per step
	// ($STRATA_METRICS_FILE), read while the job runs.
	Steps []Step `json:"steps,omitempty"`
	// Data are the dataset versions the job reads, resolved when it
	// started.
	Data []ArtifactRef `json:"data,omitempty"`
	// Code is the code artifact the job runs, resolved when it started.
	Code *ArtifactRef `json:"code,omitempty"`
	// Members are the launcher's per-rank states.
	Members  []MemberStatus `json:"members,omitempty"`
	Attempt  int            `json:"attempt,omitempty"`
	Error    string         `json:"error,omitempty"`
	Created  time.Time      `json:"created"`
	Started  time.Time      `json:"started,omitzero"`
	Finished time.Time      `json:"finished,omitzero"`
}

// Terminal says the job has ended.
func (j Job) Terminal() bool { return j.State == JobSucceeded || j.State == JobFailed }

// Over reports whether the job placed at generation gen and epoch is over
// by this record: it succeeded (whichever run), or the run of this very
// epoch failed. A failure written by an earlier epoch's run does not end
// a job placed again since.
func (j Job) Over(gen, epoch uint64) bool {
	if j.Generation != gen {
		return false
	}
	return j.State == JobSucceeded || j.State == JobFailed && j.Epoch == epoch
}

// Rollout stages. A rollout begins retraining when drift is detected,
// becomes a canary at the drifted site when the job registered a model,
// and ends promoted (everywhere), rolled back, or failed (the job failed).
const (
	StageRetraining = "retraining"
	StageCanary     = "canary"
	StagePromoted   = "promoted"
	StageRolledBack = "rolled-back"
	StageFailed     = "failed"
)

// Rollout is a service's latest retrain-and-rollout, written by the
// service's owner (GET /v1/placements shows it with the placement).
type Rollout struct {
	Policy string `json:"policy"`
	// Generation is the policy generation it belongs to: applying the
	// policy again starts afresh.
	Generation uint64 `json:"generation"`
	// Seq counts the service's retrains.
	Seq   int    `json:"seq"`
	Stage string `json:"stage"`
	Model string `json:"model"`
	// From is the version served when drift was detected; To the new one.
	From string `json:"from"`
	To   string `json:"to,omitempty"`
	// Job is the TrainingJob's name.
	Job     string        `json:"job,omitempty"`
	Trigger *DriftTrigger `json:"trigger,omitempty"`
	// CanarySite and CanaryNodes serve To first; Served and Failed are
	// their requests on it so far, against CanaryRequests and
	// MaxErrorRate.
	CanarySite     string   `json:"canary_site,omitempty"`
	CanaryNodes    []string `json:"canary_nodes,omitempty"`
	CanaryRequests int      `json:"canary_requests,omitempty"`
	MaxErrorRate   float64  `json:"max_error_rate,omitempty"`
	Served         uint64   `json:"served,omitempty"`
	Failed         uint64   `json:"failed,omitempty"`
	// Baseline is what From did on the canary nodes before they swapped
	// to To: the canary is judged against it, on the same site's traffic.
	Baseline *CanaryBaseline `json:"baseline,omitempty"`
	Message  string          `json:"message"`
	Started  time.Time       `json:"started"`
	Updated  time.Time       `json:"updated"`
	Steps    []RolloutStep   `json:"steps"`
	// Attempt counts the retrains of From in a row, this one included (1
	// for the first): a rollout that ends without promoting leaves From
	// served, and the next retrain of it counts on.
	Attempt int `json:"attempt,omitempty"`
	// NextRetrainAfter is set when the rollout ended without promoting
	// (unchanged, rolled back, failed): no drift alarm on From starts
	// another retrain before it. The wait doubles with Attempt.
	NextRetrainAfter time.Time `json:"next_retrain_after,omitzero"`
	// Tried are the model versions the service served, canaried or rolled
	// back lately, oldest first: a retrain that yields the bytes of any of
	// them ends unchanged instead of being rolled out again.
	Tried []TriedModel `json:"tried,omitempty"`
}

// CanaryBaseline is the current version's record on the canary nodes as
// the canary started: its requests there, and what its drift monitors
// there last said.
type CanaryBaseline struct {
	Version string `json:"version"`
	Served  uint64 `json:"served"`
	Failed  uint64 `json:"failed"`
	// Drift is what the monitors said ("alarm on a (cusum 1.12) after 411
	// rows at edge-a-1").
	Drift string `json:"drift,omitempty"`
}

// DriftTrigger is the drift alarm that started a retrain.
type DriftTrigger struct {
	Site      string    `json:"site"`
	Node      string    `json:"node"`
	Version   string    `json:"version"`
	Samples   int64     `json:"samples"`
	At        time.Time `json:"at"`
	Feature   string    `json:"feature"`
	Statistic float64   `json:"statistic"`
	Detector  string    `json:"detector"`
	// Drifted names every feature (and "prediction") past the threshold.
	Drifted []string `json:"drifted"`
}

// RolloutStep is one stage change.
type RolloutStep struct {
	Time    time.Time `json:"time"`
	Stage   string    `json:"stage"`
	Message string    `json:"message"`
}

// Active says the rollout is under way (not ended).
func (r Rollout) Active() bool { return r.Stage == StageRetraining || r.Stage == StageCanary }

// DriftCapture is a drifted site's labelled live rows kept for a retrain.
type DriftCapture struct {
	// AlarmAt is the alarm the capture follows (Drift.AlarmAt).
	AlarmAt time.Time `json:"alarm_at"`
	// Rows are the labelled rows kept so far, Want the rows the retrain
	// waits for.
	Rows int `json:"rows"`
	Want int `json:"want"`
	// Dataset is the published capture, "name:version", once Rows
	// reached Want.
	Dataset string `json:"dataset,omitempty"`
	// Error says why the capture could not be published.
	Error string `json:"error,omitempty"`
}

// Drift is one node's drift monitor for one policy's model, as the
// mesh's catalog holds it (GET /v1/drift).
type Drift struct {
	Policy  string `json:"policy"`
	Model   string `json:"model"`
	Version string `json:"version"`
	Site    string `json:"site"`
	Node    string `json:"node"`
	// Detector, Threshold and Window are the monitor's settings.
	Detector  string  `json:"detector"`
	Threshold float64 `json:"threshold"`
	Window    int     `json:"window"`
	// Reference says what the live window is compared with: "training"
	// (the summary shipped with the model) or "first" (the first Window
	// live samples); Ready is false while "first" is still collecting.
	Reference string `json:"reference"`
	Ready     bool   `json:"ready"`
	// ReferenceSite is set when the training reference is the one the
	// model carries for this site: it was retrained on the site's
	// captured rows.
	ReferenceSite string `json:"reference_site,omitempty"`
	// State is the monitor's state: DriftWarming, DriftOK, DriftAlarm or
	// DriftError (see Status; agents before it wrote none).
	State string `json:"state,omitempty"`
	// Seen counts the samples observed by this version's monitor here.
	Seen int64 `json:"seen"`
	// Alarmed is the hysteresis state; AlarmSeen and AlarmAt say when the
	// current alarm fired. The alarms and clears themselves, also one that
	// cleared before this record was next written, are in DriftLog.
	Alarmed   bool      `json:"alarmed"`
	AlarmSeen int64     `json:"alarm_seen,omitempty"`
	AlarmAt   time.Time `json:"alarm_at,omitzero"`
	// AlarmSource says which detector raised the current alarm: "stream"
	// (the per-row CUSUM) or "window"; AlarmFeature names the feature it
	// alarmed on (for a windowed alarm, the worst feature of the
	// evaluation that raised it; records of agents before that leave it
	// empty).
	AlarmSource  string `json:"alarm_source,omitempty"`
	AlarmFeature string `json:"alarm_feature,omitempty"`
	// AlarmStatistic is the alarm's statistic as it crossed: for the
	// streaming detector over its threshold (above 1), for the windowed
	// one the detector's figure (the corrected p-value for ks). Taken at
	// the crossing, not after the side restarted. AlarmDrifted names the
	// features that alarmed with it.
	AlarmStatistic float64  `json:"alarm_statistic,omitempty"`
	AlarmDrifted   []string `json:"alarm_drifted,omitempty"`
	// Capture is the ground truth this node keeps for a retrain that
	// trains on the drifted site's rows (retrain.capture), from the alarm
	// at Capture.AlarmAt on.
	Capture *DriftCapture `json:"capture,omitempty"`
	// Stream is the streaming detector's state per feature.
	Stream []StreamScore `json:"stream,omitempty"`
	// Scores are the latest evaluation's, per feature then the prediction.
	Scores []Score `json:"scores,omitempty"`
	// History is the worst score of recent evaluations, oldest first.
	History []DriftPoint `json:"history,omitempty"`
	// Served and Failed count the version's requests here (for canaries).
	Served uint64 `json:"served"`
	Failed uint64 `json:"failed"`
	// Dropped counts sampled rows the monitor could not keep up with.
	Dropped uint64 `json:"dropped,omitempty"`
	// Invalid counts this version's rows dropped here because a watched
	// value (or the prediction) was NaN or infinite; the monitor goes on
	// with the next row.
	Invalid uint64 `json:"invalid,omitempty"`
	// Error says why the monitor cannot run (no reference, unknown
	// feature).
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// Drift monitor states (Drift.State) and the kinds of DriftLog entries.
const (
	// DriftWarming: the monitor has not yet seen enough rows to judge
	// (collecting a "first" reference, or before its first evaluation
	// that is not over or its first alarm); no alarm does not mean no
	// drift yet.
	DriftWarming = "warming"
	// DriftOK: judged, no alarm. As an entry: the warm-up ended with no
	// alarm.
	DriftOK = "ok"
	// DriftAlarm: alarmed.
	DriftAlarm = "alarm"
	// DriftClear is an entry only: an alarm cleared, by the detector
	// that raised it (the state is DriftOK again).
	DriftClear = "clear"
	// DriftError: the monitor cannot run.
	DriftError = "error"
)

// Status is the monitor's state, for records of agents that wrote no
// State too: error, alarm, else ok.
func (d Drift) Status() string {
	switch {
	case d.State != "":
		return d.State
	case d.Error != "":
		return DriftError
	case d.Alarmed:
		return DriftAlarm
	}
	return DriftOK
}

// DriftLogKeep bounds DriftLog.Entries: the latest entries of a policy's
// monitor on a node, across its versions. A reader that sees the record
// at least once every DriftLogKeep transitions misses none.
const DriftLogKeep = 64

// DriftLog is one node's log of a policy's drift monitor transitions:
// each warm-up, alarm, clear and error is an entry with its own sequence
// number, written as it happens, so that an alarm that clears before the
// next look at the Drift record is still seen (GET /v1/events derives the
// drift events from it). Written only by that node, kept until the
// policy is no longer served there.
type DriftLog struct {
	Policy string `json:"policy"`
	Model  string `json:"model"`
	Site   string `json:"site"`
	Node   string `json:"node"`
	// Since is when this log began: sequence numbers count from 1 within
	// one log, and a log deleted and begun again starts over.
	Since time.Time `json:"since"`
	// Entries are the latest DriftLogKeep transitions, oldest first, Seq
	// increasing by one.
	Entries []DriftEntry `json:"entries"`
}

// DriftEntry is one transition of a drift monitor.
type DriftEntry struct {
	// Seq numbers the log's entries from 1.
	Seq uint64 `json:"seq"`
	// Kind is DriftWarming (a monitor started), DriftOK (it judged, no
	// drift), DriftAlarm, DriftClear or DriftError.
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
	// Version is the model version monitored; Samples the rows it had
	// seen.
	Version string `json:"version"`
	Samples int64  `json:"samples"`
	// Source is the detector that raised the alarm (for a clear: that
	// raised the alarm it clears): "stream" or "window".
	Source string `json:"source,omitempty"`
	// Detector ("cusum" for the streaming detector, else the windowed
	// one), Feature and Statistic say what crossed, as it crossed (see
	// Drift.AlarmStatistic); Drifted names every feature past its
	// threshold then. Alarms only.
	Detector  string   `json:"detector,omitempty"`
	Feature   string   `json:"feature,omitempty"`
	Statistic float64  `json:"statistic,omitempty"`
	Drifted   []string `json:"drifted,omitempty"`
	// Window is the rows a warming monitor needs before its first
	// evaluation (warming only).
	Window int `json:"window,omitempty"`
	// Error says why the monitor cannot run (errors only).
	Error string `json:"error,omitempty"`
}

// Key is the log's key, "policy/node".
func (l DriftLog) Key() string { return l.Policy + "/" + l.Node }

// Append adds e with the next sequence number, dropping the oldest
// entries past DriftLogKeep, and returns the entry as stored.
func (l *DriftLog) Append(e DriftEntry) DriftEntry {
	e.Seq = 1
	if n := len(l.Entries); n > 0 {
		e.Seq = l.Entries[n-1].Seq + 1
	}
	l.Entries = append(l.Entries, e)
	if n := len(l.Entries); n > DriftLogKeep {
		l.Entries = slices.Delete(l.Entries, 0, n-DriftLogKeep)
	}
	return e
}

// DriftPoint is one evaluation in a Drift's history.
type DriftPoint struct {
	Time time.Time `json:"time"`
	Seen int64     `json:"seen"`
	// Feature is the worst feature; Statistic its score (the corrected
	// p-value for KS).
	Feature   string  `json:"feature"`
	Statistic float64 `json:"statistic"`
	Drifted   bool    `json:"drifted"`
}

// NodeNames lists the placement's nodes by name, comma-separated.
func (p Placement) NodeNames() string {
	s := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		s[i] = n.Name
	}
	return strings.Join(s, ",")
}

// WorstScore returns the score most past its threshold's side: the
// smallest p-value for KS, the largest statistic otherwise.
func WorstScore(ss []Score, det string) Score {
	var w Score
	for i, s := range ss {
		a, b := ScoreStat(s, det), ScoreStat(w, det)
		if det == detectorKS {
			a, b = -a, -b
		}
		if i == 0 || a > b {
			w = s
		}
	}
	return w
}

// ScoreStat is the figure a detector is judged by: the corrected p-value
// for KS (smaller is worse), the statistic otherwise.
func ScoreStat(s Score, det string) float64 {
	if det == detectorKS {
		return s.PValue
	}
	return s.Statistic
}

// Document parses the stored source back into its policy document.
func (p Policy) Document() (*policy.Document, error) {
	file := p.File
	if file == "" {
		file = p.Key()
	}
	docs, err := policy.Parse(file, []byte(p.Source))
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("policy %s: stored source holds %d documents", p.Key(), len(docs))
	}
	return docs[0], nil
}

// ActiveRollout returns a service's rollout record when it belongs to the
// policy's current generation.
func (c *Catalog) ActiveRollout(p Policy) (Rollout, bool) {
	r, err := c.Rollouts.Value(p.Key())
	if err != nil || r.Generation != p.Generation {
		return Rollout{}, false
	}
	return r, true
}

// ModelFor is the model version node serves for a service: the policy's,
// unless a rollout moved it (the canary nodes first, then everyone).
func (c *Catalog) ModelFor(p Policy, svc *policy.InferenceServiceSpec, node string) policy.ModelRef {
	r, ok := c.ActiveRollout(p)
	if !ok {
		return svc.Model
	}
	ref := policy.ModelRef{Name: r.Model, Version: r.From}
	switch {
	case r.Stage == StagePromoted, r.Stage == StageCanary && slices.Contains(r.CanaryNodes, node):
		ref.Version = r.To
	}
	return ref
}

// AlarmCause names what raised the current alarm: the feature, the
// detector ("cusum" for the streaming detector, else the windowed one) and
// its statistic as it crossed (for the CUSUM, the side over its
// threshold). For a windowed alarm of a record that kept no feature, the
// worst of the latest scores.
func (d Drift) AlarmCause() (feature, detector string, stat float64) {
	if d.AlarmSource == sourceStream {
		return d.AlarmFeature, "cusum", d.AlarmStatistic
	}
	if d.AlarmFeature != "" {
		return d.AlarmFeature, d.Detector, d.AlarmStatistic
	}
	ws := WorstScore(d.Scores, d.Detector)
	return ws.Name, d.Detector, ScoreStat(ws, d.Detector)
}

// Gang states: a gang attempt is starting (members prepare and say they
// are ready), running (every member was ready and starts its ranks), or
// ended.
const (
	GangStarting  = "starting"
	GangRunning   = "running"
	GangSucceeded = "succeeded"
	GangFailed    = "failed"
)

// Gang member states, for one attempt.
const (
	MemberReady     = "ready" // prepared; waits for the gang to run
	MemberRunning   = "running"
	MemberSucceeded = "succeeded"
	MemberFailed    = "failed"
)

// Gang is the rendezvous of an exec TrainingJob spanning several nodes,
// written by the node that runs rank 0 (the job's Node). Every member
// starts its own ranks when the gang is running at an attempt it is ready
// for, and stops them when the attempt changes or the gang ends. Derived
// from the placement at the epoch run.
type Gang struct {
	Job string `json:"job"`
	Key string `json:"key"`
	// Run names this run of the gang (the leader picks it at random), so
	// that a member never acts on a past run's record.
	Run string `json:"run"`
	// Generation and Epoch are the policy generation and placement epoch
	// run; a record of another epoch is stale.
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
	// Attempt counts gang starts from 1: a failed attempt is restarted as
	// a whole at the next one, up to the job's retries.
	Attempt int    `json:"attempt"`
	State   string `json:"state"`
	// MasterAddr and MasterPort are rank 0's rendezvous address (its
	// node's advertised address) and a port that was free there.
	MasterAddr string `json:"master_addr"`
	MasterPort int    `json:"master_port"`
	// Ranks are the gang's ranks in order: rank i runs on Ranks[i].Node.
	Ranks   []Rank    `json:"ranks"`
	Message string    `json:"message,omitempty"`
	Updated time.Time `json:"updated"`
}

// GangMember is one member node's answer to a gang attempt, written by
// that node and derived from the gang record it read.
type GangMember struct {
	Job     string `json:"job"`
	Node    string `json:"node"`
	Run     string `json:"run"`
	Epoch   uint64 `json:"epoch"`
	Attempt int    `json:"attempt"`
	State   string `json:"state"`
	// Ranks are the states of the ranks this node runs.
	Ranks []MemberStatus `json:"ranks,omitempty"`
	// Error says why the member failed (its data, a rank's exit).
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// Key is the member record's key, "job/node".
func (m GangMember) Key() string { return m.Job + "/" + m.Node }

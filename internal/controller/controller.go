// Package controller places the policies this agent owns and answers the
// assignments that name this node. Ownership: each policy's owner is chosen
// by rendezvous hashing over the live controller-capable agents; the owner
// reconciles desired against actual (re-placing after failures) and drives
// each service's retrain-and-rollout. Every node, owner or not, admits or
// refuses what is placed on it against its local ledger, so it is never
// over-committed.
//
//	c := controller.New(controller.Config{Mesh: m, Catalog: cat, Artifacts: svc, Compile: compile, Load: load})
//	go c.Run(ctx)
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"go.yaml.in/yaml/v3"
)

// Controller places the policies this agent owns and admits (or refuses)
// the assignments that name this node. One goroutine runs it.
type Controller struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	ledger *placement.Ledger
	// held maps policy key → the epoch admitted (or refused) here.
	held map[string]mesh.Assignment
	// lastTry is when an owned, not fully placed policy was last placed;
	// tries counts the retries since that came to the same placement (see
	// retryDelay).
	lastTry map[string]time.Time
	tries   map[string]int
	// owners are the controller-capable agents that owned policies in the
	// last pass, and ownersChanged when that set last changed; before
	// them, prevOwners (reconcile's goroutine only; see ownerSettle).
	owners, prevOwners []string
	ownersChanged      time.Time
	// failedSince is when this controller first saw each failed node
	// failed (reconcile's goroutine only).
	failedSince map[string]time.Time
	// holding says why each training job that needs placing waits
	// (reconcile's goroutine only; see holdJob).
	holding map[string]string
	// settleUntil is when this controller's view of the mesh is current
	// again after a start or a pause (see settle); Run's goroutine only.
	settleUntil time.Time
	// liveNodes names the nodes alive or suspect in the last pass
	// (reconcile's goroutine only): a change resets retryDelay.
	liveNodes string
	// live is the engine's view of the mesh, kept from round to round
	// (reconcile's goroutine only); liveStats is its latest stats.
	live      placement.Live
	liveStats placement.LiveStats

	// steps are a pass's steps, in order; passSeconds times them.
	steps []struct {
		name string
		run  func()
	}
	// docs are the facts of each policy's document (see facts).
	docs map[string]docFacts

	passSeconds *prometheus.HistogramVec
	// pauses counts the waits between passes longer than pauseGap.
	pauses prometheus.Counter
	// retrainStarts, retrainEnds and rolloutEnds count the retrain and
	// rollout decisions this controller wrote (see countRollout).
	retrainStarts            *prometheus.CounterVec
	retrainEnds, rolloutEnds *prometheus.CounterVec
}

// coordSlack is how far a node's coordinate may move before the
// controller's view of the mesh is indexed again: well under any latency
// SLO, well over Vivaldi's jitter on a LAN.
const coordSlack = time.Millisecond

// JobGrace is how long a training job stays placed on a failed node of a
// reachable site before its owner places it elsewhere: longer than the
// node's job lease (jobs.DefaultLease, 10s) and a margin, so that the
// node has stopped its run, or will not record it, by then. A job never
// runs to completion twice.
const JobGrace = 15 * time.Second

// retryEvery is how soon an owner retries a policy it could not fully
// place; each retry that comes to the same placement doubles the wait, up
// to retryMax, and a change of the mesh's members starts again at
// retryEvery. A policy placed in part is then a stable state, not a loop
// of new epochs.
const (
	retryEvery = 5 * time.Second
	retryMax   = time.Minute
)

// retryDelay is how long an owner waits before the next retry of a
// policy whose last tries retries came to the same placement.
func retryDelay(tries int) time.Duration {
	return min(retryEvery<<min(tries, 8), retryMax)
}

// ownerSettle is how long after the set of owners changed (a controller
// failed, joined, or came back) an agent waits before it places a policy
// that the previous set gave to another agent. Membership seen from two
// agents differs for a moment after a change; both would otherwise place
// the same policy, and a training job could start twice.
const ownerSettle = 5 * time.Second

// New returns a controller; nothing runs until Run.
func New(cfg Config) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, held: map[string]mesh.Assignment{}, lastTry: map[string]time.Time{}, tries: map[string]int{}, failedSince: map[string]time.Time{}, holding: map[string]string{}, docs: map[string]docFacts{},
		live: placement.Live{CoordSlack: coordSlack}}
	c.steps = []struct {
		name string
		run  func()
	}{{"reconcile", c.reconcile}, {"admit", c.admit}, {"rollouts", c.rollouts}, {"experiments", c.experiments}}
	if cfg.Registerer != nil {
		c.passSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_controller_pass_seconds",
			Help:    "How long each step of a controller pass took: reconcile (place owned policies), admit (answer this node's assignments), rollouts, experiments.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"step"})
		c.pauses = prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_controller_pauses_total",
			Help: "Times the controller resumed after a pause (stopped, frozen or starved for over 4s between passes) and placed nothing for 5s while its view of the mesh caught up."})
		c.retrainStarts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_retrains_started_total",
			Help: "Retrains this controller started for a drift alarm on the version served by a service it owns."}, []string{"service"})
		c.retrainEnds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_retrains_total",
			Help: "Retrains of a service this controller owns that ended, by outcome: succeeded (the job registered a model version) or failed (the job failed or registered no model, or the retrain template did not apply)."}, []string{"service", "outcome"})
		c.rolloutEnds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_rollouts_total",
			Help: "Rollouts of a service this controller owns that ended, by outcome: promoted (the new version serves everywhere), rolled_back (its canary drifted, failed requests or timed out), unchanged (the retrain gave a model already served or tried) or failed (the retrain failed). All but promoted leave the old version serving."}, []string{"service", "outcome"})
		cfg.Registerer.MustRegister(c.passSeconds, c.pauses, c.retrainStarts, c.retrainEnds, c.rolloutEnds)
	}
	return c
}

// SnapshotStats says how the controller's view of the mesh was kept: how
// often it was indexed afresh and how often updated in place.
func (c *Controller) SnapshotStats() placement.LiveStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.liveStats
}

// round is the view of the mesh that one reconcile pass places against:
// taken from the controller's Live snapshot when the first policy needs
// it, it takes each placement's reservations, so policies placed in one
// pass do not all count on the same free resources.
type round struct {
	c      *Controller
	nodes  []mesh.Node
	byName map[string]mesh.Node
	snap   *placement.Snapshot
	err    error
}

func (r *round) snapshot() (*placement.Snapshot, error) {
	if r.snap == nil && r.err == nil {
		ns := make([]placement.Node, len(r.nodes))
		for i, n := range r.nodes {
			ns[i] = engineNode(n)
		}
		if r.c.cfg.RemoteSites != nil {
			r.c.live.SetRemoteClients(RemoteClients(r.c.cfg.Mesh.Local().Site, r.c.cfg.RemoteSites()))
		}
		r.snap, r.err = r.c.live.Update(ns)
		r.c.mu.Lock()
		r.c.liveStats = r.c.live.Stats()
		r.c.mu.Unlock()
	}
	return r.snap, r.err
}

// settle is how long a controller that knows other nodes places nothing
// after it restarts or resumes from a pause. Its view of the mesh is then
// what it stored or held before: nodes that are alive may show failed,
// and placements made meanwhile are missing. The join, or the catalog's
// anti-entropy, brings it up to date within seconds; placing before that
// would move replicas off live nodes, or place a training job another
// owner placed meanwhile.
const settle = 5 * time.Second

// pauseGap is how long the wait between two passes may last before the
// controller counts itself paused (stopped, frozen, starved): it waits at
// most a second. A slow pass is not a pause: its view of the mesh is read
// as it starts. (Counting the pass in made a controller whose passes took
// over 4 s, thousands of records on a busy host, settle after every pass
// and place nothing: sweeps stopped with their trials never placed.)
const pauseGap = 4 * time.Second

// Run places, admits and drives rollouts until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	if len(c.cfg.Mesh.Nodes()) > 1 {
		// Restarted: the nodes it knows are the ones it stored. (A new
		// agent learns them all from its join, current.)
		c.settleUntil = time.Now().Add(settle)
	}
	waited := time.Now()
	for {
		if now := time.Now(); now.Sub(waited) > pauseGap {
			c.settleUntil = now.Add(settle)
			if c.pauses != nil {
				c.pauses.Inc()
			}
			c.log.Info("controller resumed after a pause: placing nothing until its view of the mesh is current", "pause", now.Sub(waited).Round(time.Millisecond), "settle", settle)
		}
		changed := c.cfg.Mesh.Changed()
		// Each step reads peers' documents and records: one that panics
		// costs its pass, not the others' nor the agent.
		panicked := false
		for _, step := range c.steps {
			start := time.Now()
			if c.cfg.Guard.Do("controller", step.run) != nil {
				panicked = true
			}
			if c.passSeconds != nil {
				c.passSeconds.WithLabelValues(step.name).Observe(time.Since(start).Seconds())
			}
		}
		if panicked {
			if !c.cfg.Guard.Wait(ctx) {
				return
			}
			continue // the pass again, after the pause
		}
		waited = time.Now()
		select {
		case <-ctx.Done():
			return
		case <-changed:
			// Let a burst of changes land before the next pass.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		case <-tick.C:
		}
	}
}

// controllers returns the names of live controller-capable nodes: alive
// or suspect. A suspect agent is often only slow (a busy host); it keeps
// its policies until it is declared failed, so that a moment's suspicion
// does not give them a second owner. A mesh with no live
// controller-capable agent (one edge agent alone, an edge site on its own)
// is not left without owners: then every live agent may own policies, so a
// lone agent places and serves what is applied to it.
func controllers(nodes []mesh.Node) []string {
	var out, alive []string
	for _, n := range nodes {
		if n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect {
			continue
		}
		alive = append(alive, n.Name)
		if n.Controller {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 {
		return alive
	}
	return out
}

// UnreachableControllers returns the controller-capable nodes this agent
// knows (that have not left) when none of them is alive, and nil when one
// is, or none is known. Then the live agents that own policies in their
// stead (see controllers) are cut off from them, or they are all down:
// a training job those owners placed might be placed by a controller on
// the other side of a cut as well, and run twice.
func UnreachableControllers(nodes []mesh.Node) []string {
	var out []string
	for _, n := range nodes {
		switch {
		case !n.Controller || n.Status == mesh.StatusLeft:
		case n.Status == mesh.StatusAlive || n.Status == mesh.StatusSuspect:
			return nil
		default:
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// holdJob says why training job key, which needs placing, must wait, or
// "" when it may be placed now. A training job runs to completion at most
// once, so it is not placed
//   - by an agent that owns it only because no controller-capable agent
//     is reachable (see UnreachableControllers), nor
//   - while a node that may still run it (alive, in an unreachable site,
//     or failed for less than JobGrace) has admitted an epoch of it newer
//     than the placement held here: the placement was made by an owner
//     whose record has not reached this agent yet (it wrote it and failed
//     before it spread, or it was cut off).
func (c *Controller) holdJob(key string, rec catalog.Placement, have bool, nodes []mesh.Node, cut map[string]bool) string {
	if away := UnreachableControllers(nodes); len(away) > 0 {
		return fmt.Sprintf("no controller-capable agent is reachable (%s): only they place training jobs, so that no job is placed on both sides of a cut", strings.Join(away, ", "))
	}
	for _, n := range nodes {
		as, ok := AssignmentOf(n, key)
		if !ok || !as.Accepted || (have && as.Epoch <= rec.Epoch) {
			continue
		}
		switch {
		case n.Status == mesh.StatusAlive, n.Status == mesh.StatusSuspect, n.Status == mesh.StatusUnreachable,
			n.Status == mesh.StatusFailed && (cut[n.Site] || time.Since(c.failedSince[n.Name]) < JobGrace):
			return fmt.Sprintf("node %s admitted epoch %d of it, whose placement has not reached this agent yet", n.Name, as.Epoch)
		}
	}
	return ""
}

// lastEpoch returns the newest epoch of policy key that any node has
// answered: a new placement takes a later one, even where the record of
// that epoch never reached this agent.
func lastEpoch(nodes []mesh.Node, key string) uint64 {
	var e uint64
	for _, n := range nodes {
		if as, ok := AssignmentOf(n, key); ok {
			e = max(e, as.Epoch)
		}
	}
	return e
}

// reconcile places every policy this agent owns whose placement is
// missing, stale, or lost a node.
func (c *Controller) reconcile() {
	nodes := c.cfg.Mesh.Nodes()
	if len(nodes) > 1 && time.Now().Before(c.settleUntil) {
		return // see settle
	}
	owners := controllers(nodes)
	c.noteOwners(owners)
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	cut := cutOrCutting(nodes)
	if live := liveNames(nodes); live != c.liveNodes {
		c.liveNodes = live
		c.mu.Lock()
		clear(c.tries) // retry what was placed in part soon
		c.mu.Unlock()
	}
	since := map[string]time.Time{}
	for _, n := range nodes {
		if n.Status == mesh.StatusFailed {
			since[n.Name] = cmp.Or(c.failedSince[n.Name], time.Now())
		}
	}
	c.failedSince = since
	recs := c.placements()
	view := &round{c: c, nodes: nodes, byName: byName}
	for _, p := range c.policies() {
		key := p.Key()
		if !c.owns(key, owners) {
			continue
		}
		rec, have := recs[key]
		if p.Kind == policy.KindTrainingJob && c.facts(p).sweep {
			continue // its trials are placed, not it
		}
		if p.Kind == policy.KindTrainingJob {
			if j, err := c.cfg.Catalog.Jobs.Value(p.Name); err == nil && j.Over(p.Generation, rec.Epoch) {
				if !have || rec.State != catalog.StateDone {
					rec = catalog.Placement{Key: key, Kind: p.Kind, Name: p.Name, Owner: c.cfg.Mesh.Name(), Epoch: rec.Epoch + 1, Generation: p.Generation,
						State: catalog.StateDone, Message: fmt.Sprintf("job %s on %s; its nodes are released", j.State, j.Node), Updated: time.Now().UTC()}
					c.write(rec)
				}
				continue
			}
		}
		if have && rec.State == catalog.StatePending && rec.Generation == p.Generation && allAdmitted(rec, byName) {
			rec.State, rec.Message, rec.Updated = catalog.StatePlaced, "every node admitted the work", time.Now().UTC()
			if len(rec.Nodes) < rec.Wanted {
				rec.Message = partly(rec)
			}
			c.write(rec)
		}
		if have && p.Kind == policy.KindInferenceService && rec.State == catalog.StatePlaced && noteReplicas(&rec, byName) {
			c.write(rec)
		}
		need, why := c.needsPlacement(p, rec, have, byName, cut)
		if !need {
			continue
		}
		if p.Kind == policy.KindTrainingJob {
			if wait := c.holdJob(key, rec, have, nodes, cut); wait != "" {
				if c.holding[key] != wait {
					c.log.Info("not placing training job yet", "policy", key, "why", why, "waiting", wait)
				}
				c.holding[key] = wait
				continue
			}
			delete(c.holding, key)
		}
		c.place(p, rec, have, view, cut, why)
	}
	// Placements of deleted policies: the owner of the key removes them.
	// Only ready ones: a placement that reached this agent before its
	// policy (a sync after a cut) waits for it, and deleting it would
	// delete it everywhere, stopping the job or service it placed.
	for key := range c.readyPlacements() {
		if _, err := c.cfg.Catalog.Policies.Get(key); errors.Is(err, catalog.ErrNotFound) && placement.Owner(key, owners) == c.cfg.Mesh.Name() {
			_ = c.cfg.Catalog.Placements.Delete(key)
		}
	}
}

// cutOrCutting returns the unreachable sites among nodes, and the sites
// being cut: no node alive, some suspect. A site cut off by the network
// stops answering as a whole, but its nodes are declared failed one by
// one; until the last is, the first failed one looks like a node failure,
// and its replicas would move away from the site's clients, then move
// again after the heal with no node at fault. Seen so, a node failure in
// a site whose other nodes answer is still one.
func cutOrCutting(nodes []mesh.Node) map[string]bool {
	cut := mesh.UnreachableSites(nodes)
	alive, suspect := map[string]bool{}, map[string]bool{}
	for _, n := range nodes {
		switch n.Status {
		case mesh.StatusAlive:
			alive[n.Site] = true
		case mesh.StatusSuspect:
			suspect[n.Site] = true
		}
	}
	for site := range suspect {
		if !alive[site] {
			cut[site] = true
		}
	}
	return cut
}

// liveNames lists the alive or suspect nodes' names in one string.
func liveNames(nodes []mesh.Node) string {
	var b strings.Builder
	for _, n := range nodes {
		if n.Status == mesh.StatusAlive || n.Status == mesh.StatusSuspect {
			b.WriteString(n.Name)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// noteOwners records the set of owners of this pass (see ownerSettle).
func (c *Controller) noteOwners(owners []string) {
	sorted := slices.Sorted(slices.Values(owners))
	if slices.Equal(sorted, c.owners) {
		return
	}
	if c.owners != nil {
		c.prevOwners, c.ownersChanged = c.owners, time.Now()
	}
	c.owners = sorted
}

// owns says whether this agent owns policy key among owners and may act on
// it now. Within ownerSettle of a change of
// that set it leaves alone a policy that the previous set gave to another
// agent: that agent may not be gone (a busy host declared failed refutes
// it within seconds), and may not have seen the change yet.
func (c *Controller) owns(key string, owners []string) bool {
	if placement.Owner(key, owners) != c.cfg.Mesh.Name() {
		return false
	}
	return time.Since(c.ownersChanged) >= ownerSettle || placement.Owner(key, c.prevOwners) == c.cfg.Mesh.Name()
}

// needsPlacement says whether p must be placed (again), and why. A failed
// node of an unreachable site (cut, every node gone) is not a reason: the
// replica there serves that site's clients, who are cut off with it.
func (c *Controller) needsPlacement(p catalog.Policy, rec catalog.Placement, have bool, byName map[string]mesh.Node, cut map[string]bool) (bool, string) {
	switch {
	case !have:
		return true, "new policy"
	case rec.Generation != p.Generation:
		return true, "policy changed"
	}
	for _, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if ok && (n.Status == mesh.StatusUnreachable || n.Status == mesh.StatusFailed && cut[n.Site]) {
			continue
		}
		if ok && n.Status == mesh.StatusFailed && p.Kind == policy.KindTrainingJob && time.Since(c.failedSince[n.Name]) < JobGrace {
			// The node may be cut off or paused with the job running: it
			// stops the run (or will not record it) once its lease lapses.
			continue
		}
		if !ok || n.Status == mesh.StatusFailed || n.Status == mesh.StatusLeft {
			return true, fmt.Sprintf("node %s is %s", pn.Name, statusOr(n.Status, "gone"))
		}
		if as, ok := AssignmentOf(n, rec.Key); ok && as.Epoch == rec.Epoch && !as.Accepted {
			// A stale-epoch refusal says a newer placement exists: placed
			// again, the policy takes an epoch after it, on the same node.
			return true, fmt.Sprintf("node %s refused: %s", pn.Name, as.Reason)
		}
	}
	if rec.State == catalog.StateFailed || len(rec.Nodes) < rec.Wanted || rec.State == catalog.StatePending && len(rec.Nodes) == 0 {
		c.mu.Lock()
		due := time.Since(c.lastTry[rec.Key]) > retryDelay(c.tries[rec.Key])
		c.mu.Unlock()
		if due {
			return true, "retrying an incomplete placement"
		}
	}
	return false, ""
}

// noteReplicas records in rec what each of its nodes that this agent sees
// reports of the service's replica (loading, serving, failed and why),
// and says whether that changed. The record travels to every site: an
// agent of another site, which sees none of these nodes, tells from it
// whether the service serves (GET /v1/placements), as this site's do.
func noteReplicas(rec *catalog.Placement, byName map[string]mesh.Node) bool {
	changed := false
	for i, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if !ok {
			continue
		}
		for _, r := range n.Replicas {
			if r.Policy == rec.Key && (pn.Replica != r.State || pn.Reason != r.Reason) {
				rec.Nodes[i].Replica, rec.Nodes[i].Reason = r.State, r.Reason
				changed = true
			}
		}
	}
	if changed {
		rec.Updated = time.Now().UTC()
	}
	return changed
}

// staleRefusal says whether as refused its epoch only because the node
// had seen a newer one: no reason to keep the policy off that node.
func staleRefusal(as mesh.Assignment) bool {
	return strings.HasPrefix(as.Reason, string(placement.ReasonStaleEpoch))
}

func statusOr(s mesh.Status, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}

// AssignmentOf returns node n's answer to the placement of policy key.
func AssignmentOf(n mesh.Node, key string) (mesh.Assignment, bool) {
	for _, as := range n.Assignments {
		if as.Key == key {
			return as, true
		}
	}
	return mesh.Assignment{}, false
}

// waiting says whether err of placement.Place is the mesh's state rather
// than the policy's fault: a client site unreachable or not measured yet.
func waiting(err error) bool {
	return errors.Is(err, placement.ErrClientUnreachable) || errors.Is(err, placement.ErrClientNotMeasured)
}

// allAdmitted says whether every node of rec is live and admitted rec's
// epoch.
func allAdmitted(rec catalog.Placement, byName map[string]mesh.Node) bool {
	for _, pn := range rec.Nodes {
		n := byName[pn.Name]
		as, ok := AssignmentOf(n, rec.Key)
		if !ok || as.Epoch != rec.Epoch || !as.Accepted || n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect {
			return false
		}
	}
	return len(rec.Nodes) > 0
}

// place runs the engine for p and writes the new placement record. An
// inference service placed again at the same generation keeps its healthy
// replicas (see kept) and takes from the decision only what is missing.
func (c *Controller) place(p catalog.Policy, old catalog.Placement, have bool, view *round, cut map[string]bool, why string) {
	nodes := view.nodes
	c.mu.Lock()
	c.lastTry[p.Key()] = time.Now()
	c.mu.Unlock()
	req, err := c.cfg.Compile(p)
	rec := catalog.Placement{Key: p.Key(), Kind: p.Kind, Name: p.Name, Owner: c.cfg.Mesh.Name(), Generation: p.Generation, Updated: time.Now().UTC(), Refused: map[string]string{}}
	if have {
		rec.Epoch = old.Epoch
		for k, v := range old.Refused {
			rec.Refused[k] = v
		}
	}
	rec.Epoch = max(rec.Epoch, lastEpoch(nodes, rec.Key))
	if j, err := c.cfg.Catalog.Jobs.Value(p.Name); err == nil && p.Kind == policy.KindTrainingJob {
		// After the epoch of the job's last run: its outcome there
		// (a failure) must not count as this placement's.
		rec.Epoch = max(rec.Epoch, j.Epoch)
	}
	rec.Epoch++
	if err != nil {
		rec.State, rec.Message = catalog.StateFailed, err.Error()
		c.write(rec)
		return
	}
	// Nodes that refused this policy before are not asked again until
	// their load changes; nodes that hold it keep their share.
	for _, n := range nodes {
		if as, ok := AssignmentOf(n, rec.Key); ok && !as.Accepted && have && as.Epoch == old.Epoch && !staleRefusal(as) {
			rec.Refused[n.Name] = as.Reason
		}
	}
	for name := range rec.Refused {
		req.Exclude = append(req.Exclude, name)
	}
	sort.Strings(req.Exclude)
	base, err := view.snapshot()
	if err != nil {
		rec.State, rec.Message = catalog.StateFailed, err.Error()
		c.write(rec)
		return
	}
	snap := base.Clone()
	releaseHeld(snap, nodes, rec.Key)
	dec, err := placement.Place(snap, req)
	if waiting(err) {
		// A client site cut off, or not measured yet: no distance to
		// place by. What is placed stays as it is, unseen (an owner
		// does not rewrite a placement for clients it cannot reach);
		// a new policy waits.
		if have && old.Generation == p.Generation && len(old.Nodes) > 0 {
			c.log.Debug("keeping placement: a client site has no distance", "policy", rec.Key, "err", err)
			return
		}
		rec.State, rec.Message = catalog.StatePending, err.Error()
		if c.unchanged(old, have, rec) {
			return
		}
		c.write(rec)
		return
	}
	if err != nil {
		rec.State, rec.Message = catalog.StateFailed, err.Error()
		c.write(rec)
		return
	}
	rec.Resources, rec.Wanted = req.Resources, dec.Wanted
	rec.Fallbacks, rec.Rejected = dec.Fallbacks, dec.Rejected
	var fresh []catalog.PlacedNode
	for _, pl := range dec.Placements {
		fresh = append(fresh, catalog.PlacedNode{Name: pl.Node, ID: pl.NodeID, Tier: pl.Tier, Site: pl.Site, Rank: pl.Rank, Client: pl.Client})
	}
	keep := kept(p, old, have, nodes, cut)
	rec.Nodes = mergeKept(keep, fresh, dec.Wanted)
	switch {
	case len(rec.Nodes) == 0 || (req.Kind == placement.Training && !dec.Feasible):
		rec.State, rec.Nodes = catalog.StateFailed, nil
		rec.Message = "no feasible placement: " + SummarizeRejections(dec.Rejected, dec.Fallbacks)
		if c.unchanged(old, have, rec) {
			return
		}
		if c.handOff(p, req, &rec) {
			return
		}
	case len(rec.Nodes) < dec.Wanted || (!dec.Feasible && len(keep) == 0):
		rec.State = catalog.StatePending
		rec.Message = partly(rec)
		if c.unchanged(old, have, rec) {
			return
		}
	default:
		rec.State = catalog.StatePending
		rec.Message = fmt.Sprintf("placed on %d node(s) (%s); waiting for admission", len(rec.Nodes), why)
	}
	if len(keep) > 0 {
		rec.Message += fmt.Sprintf("; kept %d healthy replica(s) where they were", len(keep))
	}
	if names := cutSites(keep, cut); len(names) > 0 {
		rec.Message += fmt.Sprintf("; site(s) %s unreachable: their replicas stay for their clients", strings.Join(names, ", "))
	}
	if rec.State != catalog.StateFailed {
		reserveNew(base, dec, rec, view.byName)
	}
	c.log.Info("placed policy", "policy", rec.Key, "epoch", rec.Epoch, "state", rec.State, "nodes", rec.NodeNames(), "why", why)
	c.mu.Lock()
	delete(c.tries, rec.Key)
	c.mu.Unlock()
	c.write(rec)
}

// handOff gives a policy that no node of this site can take to another
// site whose summary shows room (Config.HandOff): the policy's Site
// becomes that site, whose controllers place it. A policy handed over
// once is not handed on. It reports whether it handed the policy over.
func (c *Controller) handOff(p catalog.Policy, req *placement.Request, rec *catalog.Placement) bool {
	if !c.cfg.Federated || c.cfg.HandOff == nil || p.HandedFrom != "" {
		return false
	}
	site, why := c.cfg.HandOff(p, req)
	here := c.cfg.Mesh.Local().Site
	if site == "" || site == here {
		return false
	}
	p.HandedFrom, p.Site = here, site
	if _, err := c.cfg.Catalog.Policies.Put(p); err != nil {
		c.log.Warn("handing a policy to another site", "policy", p.Key(), "site", site, "err", err)
		return false
	}
	rec.State = catalog.StatePending
	rec.Message = fmt.Sprintf("no node of site %s can take it (%s); handed to site %s: %s", here, strings.TrimPrefix(rec.Message, "no feasible placement: "), site, why)
	c.log.Info("handed policy to another site", "policy", p.Key(), "site", site, "why", why)
	c.write(*rec)
	return true
}

// kept returns the replicas of an inference service's old placement to
// keep when it is placed again at the same generation: those on alive
// nodes that admitted them, and those in unreachable sites. Moving a
// healthy replica only because a fresh decision ranks another node a
// little higher would make a service placed short (or waiting for a
// failed node's replacement) move its replicas back and forth.
func kept(p catalog.Policy, old catalog.Placement, have bool, nodes []mesh.Node, cut map[string]bool) []catalog.PlacedNode {
	if !have || old.Generation != p.Generation || p.Kind != policy.KindInferenceService {
		return nil
	}
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var out []catalog.PlacedNode
	for _, pn := range old.Nodes {
		n, ok := byName[pn.Name]
		if !ok {
			continue
		}
		as, held := AssignmentOf(n, old.Key)
		switch {
		case n.Status == mesh.StatusUnreachable, n.Status == mesh.StatusFailed && cut[n.Site]:
		case n.Status == mesh.StatusAlive && held && as.Epoch >= old.Epoch && as.Accepted:
			// Serving this placement, or a newer one whose record has
			// not reached this agent: a replica is never dropped for a
			// stale epoch.
		default:
			continue
		}
		pn.Admitted, pn.Replica, pn.Reason = false, "", ""
		out = append(out, pn)
	}
	return out
}

// mergeKept fills what keep lacks of wanted from fresh. Per client site
// (fresh names clients), a client served by a kept replica takes none of
// fresh's; otherwise fresh's nodes not kept already are added in order.
func mergeKept(keep, fresh []catalog.PlacedNode, wanted int) []catalog.PlacedNode {
	if len(keep) == 0 {
		return fresh
	}
	out := slices.Clone(keep)
	perClient := len(fresh) > 0 && fresh[0].Client != ""
	for _, k := range keep {
		if k.Client == "" {
			perClient = false // recorded before clients were
		}
	}
	if perClient {
		served := map[string]int{}
		for _, k := range keep {
			served[k.Client]++
		}
		for _, f := range fresh {
			if served[f.Client] > 0 {
				served[f.Client]--
				continue
			}
			out = append(out, f)
		}
		return out
	}
	for _, f := range fresh {
		if len(out) >= wanted {
			break
		}
		if !slices.ContainsFunc(out, func(k catalog.PlacedNode) bool { return k.Name == f.Name }) {
			out = append(out, f)
		}
	}
	return out
}

// cutSites names the unreachable sites of keep's nodes, sorted.
func cutSites(keep []catalog.PlacedNode, cut map[string]bool) []string {
	var out []string
	for _, k := range keep {
		if cut[k.Site] && !slices.Contains(out, k.Site) {
			out = append(out, k.Site)
		}
	}
	slices.Sort(out)
	return out
}

// unchanged says whether rec, a placement just computed for the policy
// whose placement is old, places it on the very nodes old does, in the
// same way (placed in part, or not at all). Then no new epoch is written:
// the nodes would admit the same work again, and a policy placed in part
// would churn. If only what old says changed, old is written again at its
// epoch; the next retry waits longer (see retryDelay).
func (c *Controller) unchanged(old catalog.Placement, have bool, rec catalog.Placement) bool {
	if !have || old.Generation != rec.Generation || old.State == catalog.StateDone ||
		(old.State == catalog.StateFailed) != (rec.State == catalog.StateFailed) || !sameNodes(old.Nodes, rec.Nodes) {
		return false
	}
	c.mu.Lock()
	c.tries[rec.Key]++
	c.mu.Unlock()
	if old.Message == rec.Message {
		return true
	}
	old.Message, old.Fallbacks, old.Rejected, old.Updated = rec.Message, rec.Fallbacks, rec.Rejected, rec.Updated
	c.write(old)
	return true
}

// sameNodes says whether a and b name the same nodes, in any order.
func sameNodes(a, b []catalog.PlacedNode) bool {
	names := func(ns []catalog.PlacedNode) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = n.Name
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(names(a), names(b))
}

// partly says why rec, placed in part, has fewer nodes than it wants.
func partly(rec catalog.Placement) string {
	return fmt.Sprintf("placed %d of %d: %s", len(rec.Nodes), rec.Wanted, SummarizeRejections(rec.Rejected, rec.Fallbacks))
}

// SummarizeRejections says in a line why nodes were not chosen: each
// reason with its count, most common first, then the last fallback.
func SummarizeRejections(rejected map[placement.Reason]int, fallbacks []placement.Fallback) string {
	type kv struct {
		r placement.Reason
		n int
	}
	var rs []kv
	for r, n := range rejected {
		rs = append(rs, kv{r, n})
	}
	slices.SortFunc(rs, func(x, y kv) int {
		if x.n != y.n {
			return y.n - x.n
		}
		return strings.Compare(string(x.r), string(y.r))
	})
	var parts []string
	for _, x := range rs {
		parts = append(parts, fmt.Sprintf("%d %s", x.n, x.r))
	}
	if len(fallbacks) > 0 {
		parts = append(parts, fallbacks[len(fallbacks)-1].Message)
	}
	return strings.Join(parts, "; ")
}

// write records a placement, derived from the policy version held here:
// a node that learns the placement before the policy waits for it.
func (c *Controller) write(rec catalog.Placement) {
	var deps []mesh.Dep
	if ref, ok := c.cfg.Catalog.Policies.Ref(rec.Key); ok {
		deps = append(deps, ref)
	}
	switch _, err := c.cfg.Catalog.Placements.Put(rec, deps...); {
	case errors.Is(err, mesh.ErrSuperseded):
		// Another owner placed it at a later epoch: that placement
		// stands, and this agent's view was behind.
		c.log.Info("not writing placement: a later epoch is held", "policy", rec.Key, "epoch", rec.Epoch)
	case err != nil:
		c.log.Warn("writing placement", "policy", rec.Key, "err", err)
	}
}

// Snapshot builds the engine's view of the mesh for placing policy key
// (none when ""), with the client sites of other pools given (see
// RemoteClients). Resources key already holds on a node count as free for
// it, so re-placing keeps what still fits.
func Snapshot(nodes []mesh.Node, key string, remote ...placement.RemoteClient) (*placement.Snapshot, error) {
	var b placement.Builder
	for _, n := range nodes {
		b.Add(engineNode(n))
	}
	for _, rc := range remote {
		b.AddRemoteClient(rc)
	}
	s, err := b.Build()
	if err != nil || key == "" {
		return s, err
	}
	s = s.Clone()
	releaseHeld(s, nodes, key)
	return s, nil
}

// engineNode is n as the engine sees it: free what no admitted assignment
// holds.
func engineNode(n mesh.Node) placement.Node {
	pn := placement.Node{
		ID: n.ID, Name: n.Name, Tier: n.Tier, Site: n.Site, Region: n.Region,
		Rack: n.Labels["rack"], Labels: n.Labels, Arch: n.Capabilities.CPU.Arch,
		CPU: n.Capabilities.CPU.Millicores, FreeCPU: n.Load.FreeCPU,
		Memory: n.Capabilities.Memory.Total, FreeMemory: n.Load.FreeMemory,
		Fabric: n.Capabilities.Fabric, Alive: n.Status == mesh.StatusAlive, Coord: n.Coord,
		Artifacts: n.Locality.Artifacts, Datasets: n.Locality.Datasets,
	}
	held := heldGPUs(n, "")
	for _, g := range n.Capabilities.GPUs {
		pn.GPUs = append(pn.GPUs, placement.GPU{Model: g.Model, Memory: g.Memory, Healthy: g.Healthy, Free: !held[g.Index]})
	}
	return pn
}

// heldGPUs is the device indexes of n's GPUs held by admitted assignments
// of policies other than except.
func heldGPUs(n mesh.Node, except string) map[int]bool {
	held := map[int]bool{}
	for _, as := range n.Assignments {
		if as.Accepted && as.Key != except {
			for _, g := range as.GPUs {
				held[g] = true
			}
		}
	}
	return held
}

// releaseHeld gives back on clone s what policy key's admitted assignments
// hold: their CPU and memory, and their GPUs no other assignment holds.
func releaseHeld(s *placement.Snapshot, nodes []mesh.Node, key string) {
	for _, n := range nodes {
		as, ok := AssignmentOf(n, key)
		if !ok || !as.Accepted {
			continue
		}
		others := heldGPUs(n, key)
		var pos []int
		for j, g := range n.Capabilities.GPUs {
			if slices.Contains(as.GPUs, g.Index) && !others[g.Index] {
				pos = append(pos, j)
			}
		}
		_ = s.Release(n.ID, as.CPU, as.Memory, pos) // n is in s: it was built from nodes
	}
}

// reserveNew takes on the round's view what rec places on nodes that do
// not hold the policy yet, so the next policy placed in the round does not
// count on it. A node that can no longer hold it would refuse it at
// admission; the view is left as it is then.
func reserveNew(view *placement.Snapshot, dec *placement.Decision, rec catalog.Placement, byName map[string]mesh.Node) {
	in := map[string]bool{}
	for _, pn := range rec.Nodes {
		in[pn.Name] = true
	}
	for _, pl := range dec.Placements {
		if !in[pl.Node] {
			continue
		}
		if as, ok := AssignmentOf(byName[pl.Node], rec.Key); ok && as.Accepted {
			continue
		}
		_, _ = view.Reserve(pl.Node, pl.Resources)
	}
}

// admit answers every placement that names this node: admitted against
// the node's ledger, or refused; and releases what no placement names any
// more. The answers are published in the node's document.
func (c *Controller) admit() {
	self := c.cfg.Mesh.Local()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ledger == nil {
		var gpus []placement.GPU
		for _, g := range self.Capabilities.GPUs {
			gpus = append(gpus, placement.GPU{Model: g.Model, Memory: g.Memory, Healthy: g.Healthy, Free: true})
		}
		c.ledger = placement.NewLedger(self.Capabilities.CPU.Millicores, self.Capabilities.Memory.Total, gpus)
	}
	changed := false
	wanted := map[string]catalog.Placement{}
	for key, rec := range c.readyPlacements() {
		for _, pn := range rec.Nodes {
			if pn.Name == c.cfg.Mesh.Name() {
				wanted[key] = rec
			}
		}
	}
	// Release what is no longer ours, or was placed again at a newer
	// epoch. A record of an older epoch than the one held (a lagging
	// owner's, or a copy that arrived late) changes nothing here: the
	// node goes on serving the newer one.
	for key, as := range c.held {
		rec, ok := wanted[key]
		if ok && (rec.Epoch == as.Epoch || rec.Epoch < as.Epoch && as.Accepted) {
			continue
		}
		if as.Accepted {
			c.ledger.Release(assignmentID(key, as.Epoch))
		}
		delete(c.held, key)
		changed = true
	}
	for key, rec := range wanted {
		if _, ok := c.held[key]; ok {
			continue
		}
		as := mesh.Assignment{Key: key, Epoch: rec.Epoch}
		grant, err := c.ledger.Admit(placement.Assignment{ID: assignmentID(key, rec.Epoch), Key: key, Epoch: rec.Epoch, Resources: rec.Resources})
		if err != nil {
			as.Reason = strings.TrimPrefix(err.Error(), "placement: refused: ")
			c.log.Info("refused assignment", "policy", key, "epoch", rec.Epoch, "reason", as.Reason)
		} else {
			as.Accepted, as.CPU, as.Memory, as.GPUs = true, rec.Resources.CPU, rec.Resources.Memory, grant.GPUs
			c.log.Info("admitted assignment", "policy", key, "epoch", rec.Epoch)
		}
		c.held[key] = as
		changed = true
	}
	if !changed {
		return
	}
	var list []mesh.Assignment
	for _, as := range c.held {
		list = append(list, as)
	}
	slices.SortFunc(list, func(x, y mesh.Assignment) int { return strings.Compare(x.Key, y.Key) })
	if err := c.cfg.Mesh.Update(func(s *mesh.NodeState) { s.Assignments, s.Load = list, c.cfg.Load(s.Capabilities, list) }); err != nil {
		c.log.Warn("publishing assignments", "err", err)
	}
}

func assignmentID(key string, epoch uint64) string { return fmt.Sprintf("%s@%d", key, epoch) }

// canaryMinRequests is how many requests a canary serves before its error
// rate can roll it back.
const canaryMinRequests = 20

func step(r *catalog.Rollout, stage, format string, args ...any) {
	r.Stage, r.Message, r.Updated = stage, fmt.Sprintf(format, args...), time.Now().UTC()
	r.Steps = append(r.Steps, catalog.RolloutStep{Time: r.Updated, Stage: stage, Message: r.Message})
}

// rollouts drives the retrain-and-rollout of every service this agent owns:
// a drift alarm on the served version starts a TrainingJob; its model
// becomes a canary at the drifted site; the canary is promoted after its
// requests without regression, or rolled back.
func (c *Controller) rollouts() {
	owners := controllers(c.cfg.Mesh.Nodes())
	var drifts []catalog.Drift
	for _, p := range c.policies() {
		if p.Kind != policy.KindInferenceService || !c.owns(p.Key(), owners) {
			continue
		}
		doc, err := p.Document()
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Retrain == nil {
			continue
		}
		if drifts == nil {
			drifts = c.drifts()
		}
		var mine []catalog.Drift
		for _, d := range drifts {
			if d.Policy == p.Key() {
				mine = append(mine, d)
			}
		}
		r, have := c.cfg.Catalog.ActiveRollout(p)
		was := r
		before, _ := json.Marshal(r)
		if err := c.advance(p, doc, &r, have, mine); err != nil {
			c.log.Warn("rollout", "policy", p.Key(), "err", err)
		}
		if after, _ := json.Marshal(r); r.Stage != "" && string(after) != string(before) {
			var deps []mesh.Dep
			if ref, ok := c.cfg.Catalog.Policies.Ref(p.Key()); ok {
				deps = append(deps, ref)
			}
			if _, err := c.cfg.Catalog.Rollouts.Put(r, deps...); err != nil {
				c.log.Warn("writing rollout", "policy", p.Key(), "err", err)
			} else {
				c.countRollout(p.Name, was, r)
			}
		}
	}
}

func (c *Controller) advance(p catalog.Policy, doc *policy.Document, r *catalog.Rollout, have bool, drifts []catalog.Drift) error {
	svc := doc.InferenceService
	switch {
	case !have || !r.Active():
		cur := svc.Model.Version
		if have {
			cur = r.From
			if r.Stage == catalog.StagePromoted {
				cur = r.To
			}
		} else if m, err := serving.ModelManifest(c.cfg.Artifacts, svc.Model); err == nil {
			cur = m.Version
		}
		var trig *catalog.Drift
		for i, d := range drifts {
			if d.Alarmed && d.Version == cur && (!have || d.AlarmAt.After(r.Updated)) {
				trig = &drifts[i]
				break
			}
		}
		if trig == nil {
			return nil
		}
		if have && cur == r.From && time.Now().Before(r.NextRetrainAfter) {
			// Backing off: the alarm waits (r.Updated stays, so it still
			// counts once the wait is over if it has not cleared).
			r.Message = fmt.Sprintf("drift at %s/%s on %s@%s waits: %s of it ended without a new version; next retrain not before %s",
				trig.Site, trig.Node, r.Model, cur, retrains(r.Attempt), r.NextRetrainAfter.Format(time.RFC3339))
			return nil
		}
		return c.startRetrain(p, svc, r, cur, *trig)
	case r.Stage == catalog.StageRetraining:
		j, err := c.cfg.Catalog.Jobs.Value(r.Job)
		if err != nil {
			if rec, ok := c.placements()[policy.KindTrainingJob+"/"+r.Job]; ok && rec.State == catalog.StateFailed && r.Message != rec.Message {
				r.Message, r.Updated = "waiting for a place to train: "+rec.Message, time.Now().UTC()
			}
			return nil
		}
		if !j.Terminal() {
			return nil
		}
		// The job's placement is done with: free its nodes.
		_ = c.cfg.Catalog.Policies.Delete(policy.KindTrainingJob + "/" + r.Job)
		if j.State == catalog.JobFailed || j.Version == "" {
			endUnpromoted(r, catalog.StageFailed, "training job %s failed: %s; %s@%s keeps serving", j.Name, cmp.Or(j.Error, "it registered no model"), r.Model, r.From)
			return nil
		}
		r.To = j.Version
		if same, digest := c.sameModel(r.Model, r.From, r.To); same {
			endUnpromoted(r, catalog.StageUnchanged, "%s@%s trained by %s is the model already served (%s@%s, sha256:%.12s); nothing to roll out", r.Model, r.To, j.Name, r.Model, r.From, digest)
			return nil
		}
		if t, ok := c.triedBefore(r, r.To); ok {
			// The same data gave the same bytes: a model rolled back is
			// not canaried again.
			endUnpromoted(r, catalog.StageUnchanged, "%s@%s trained by %s is %s@%s again (%s at %s, sha256:%.12s); nothing to roll out",
				r.Model, r.To, j.Name, r.Model, t.Version, t.Outcome, t.At.Format(time.RFC3339), t.Digest)
			return nil
		}
		if s := svc.Rollout; s != nil && s.Strategy == policy.RolloutAll {
			c.remember(r, r.To, catalog.StagePromoted)
			step(r, catalog.StagePromoted, "%s@%s trained by %s on %s; rolling out everywhere at once (strategy all)", r.Model, r.To, j.Name, j.Node)
			return nil
		}
		r.CanaryNodes = canaryNodes(c.placements()[p.Key()], r.CanarySite)
		if len(r.CanaryNodes) == 0 {
			c.remember(r, r.To, catalog.StagePromoted)
			step(r, catalog.StagePromoted, "%s@%s trained by %s; no replica to canary on, promoted everywhere", r.Model, r.To, j.Name)
			return nil
		}
		c.remember(r, r.To, catalog.StageCanary)
		step(r, catalog.StageCanary, "%s@%s trained by %s on %s (accuracy %.3f); canary on %s for %d requests", r.Model, r.To, j.Name, j.Node, j.Accuracy, strings.Join(r.CanaryNodes, ","), r.CanaryRequests)
	case r.Stage == catalog.StageCanary:
		var served, failed uint64
		for _, d := range drifts {
			if d.Version != r.To || !slices.Contains(r.CanaryNodes, d.Node) {
				continue
			}
			served, failed = served+d.Served, failed+d.Failed
			if d.Alarmed {
				r.Served, r.Failed = served, failed
				c.remember(r, r.To, catalog.StageRolledBack)
				endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s drifted at %s too (%s); back to %s", r.Model, r.To, d.Node, alarmFeature(d), r.From)
				return nil
			}
		}
		if limit := canaryTimeout(svc); served < uint64(r.CanaryRequests) && time.Since(canaryStart(r)) > limit {
			r.Served, r.Failed = served, failed
			c.remember(r, r.To, catalog.StageRolledBack)
			endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s served %d of %d requests in %s (rollout.canaryTimeout); back to %s", r.Model, r.To, served, r.CanaryRequests, limit, r.From)
			return nil
		}
		if served == r.Served && failed == r.Failed {
			return nil
		}
		r.Served, r.Failed, r.Updated = served, failed, time.Now().UTC()
		rate := float64(failed) / float64(max(served, 1))
		switch {
		case served >= canaryMinRequests && rate > r.MaxErrorRate:
			c.remember(r, r.To, catalog.StageRolledBack)
			endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s failed %d of %d requests (%.1f%% > %.1f%%); back to %s", r.Model, r.To, failed, served, 100*rate, 100*r.MaxErrorRate, r.From)
		case served >= uint64(r.CanaryRequests):
			c.remember(r, r.To, catalog.StagePromoted)
			step(r, catalog.StagePromoted, "canary %s@%s served %d requests, %d failed, no drift; promoted everywhere", r.Model, r.To, served, failed)
		default:
			r.Message = fmt.Sprintf("canary %s@%s on %s: %d of %d requests, %d failed", r.Model, r.To, strings.Join(r.CanaryNodes, ","), served, r.CanaryRequests, failed)
		}
	}
	return nil
}

// sameModel reports whether two versions of a model have the same bytes,
// and their digest.
func (c *Controller) sameModel(model, a, b string) (bool, string) {
	ma, err := c.cfg.Artifacts.Lookup(storage.KindModel, model, a)
	if err != nil {
		return false, ""
	}
	mb, err := c.cfg.Artifacts.Lookup(storage.KindModel, model, b)
	if err != nil {
		return false, ""
	}
	return ma.Digest == mb.Digest, ma.Digest
}

// canaryTimeout is how long a canary may take to serve its requests.
func canaryTimeout(svc *policy.InferenceServiceSpec) time.Duration {
	if r := svc.Rollout; r != nil && r.CanaryTimeout > 0 {
		return time.Duration(r.CanaryTimeout)
	}
	return policy.DefaultCanaryTimeout
}

// canaryStart is when the rollout entered its canary stage.
func canaryStart(r *catalog.Rollout) time.Time {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Stage == catalog.StageCanary {
			return r.Steps[i].Time
		}
	}
	return r.Updated
}

// canaryNodes are the placed replicas in the drifted site, else the first.
func canaryNodes(rec catalog.Placement, site string) []string {
	var out []string
	for _, n := range rec.Nodes {
		if n.Site == site {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 && len(rec.Nodes) > 0 {
		out = []string{rec.Nodes[0].Name}
	}
	return out
}

// startRetrain applies the service's retrain template as a TrainingJob
// whose output becomes the model's next version.
func (c *Controller) startRetrain(p catalog.Policy, svc *policy.InferenceServiceSpec, r *catalog.Rollout, cur string, d catalog.Drift) error {
	seq := r.Seq + 1
	steps, tried := r.Steps, r.Tried
	attempt := 1
	if r.From == cur {
		// The last rollout left cur serving: this retrain counts on.
		attempt = r.Attempt + 1
	}
	*r = catalog.Rollout{Policy: p.Key(), Generation: p.Generation, Seq: seq, Model: svc.Model.Name, From: cur, CanarySite: d.Site, Started: time.Now().UTC(), Steps: steps, Attempt: attempt, Tried: tried}
	c.remember(r, cur, catalog.OutcomeServed)
	if len(r.Steps) > 20 {
		r.Steps = slices.Delete(r.Steps, 0, len(r.Steps)-20)
	}
	r.CanaryRequests, r.MaxErrorRate = 100, 0.01
	if s := svc.Rollout; s != nil {
		if s.CanaryRequests > 0 {
			r.CanaryRequests = s.CanaryRequests
		}
		if s.MaxErrorRate > 0 {
			r.MaxErrorRate = s.MaxErrorRate
		}
	}
	feature, det, stat := d.AlarmCause()
	r.Trigger = &catalog.DriftTrigger{Site: d.Site, Node: d.Node, Version: d.Version, Samples: d.AlarmSeen, At: d.AlarmAt, Feature: feature, Statistic: stat, Detector: det}
	for _, s := range d.Scores {
		if s.Drifted {
			r.Trigger.Drifted = append(r.Trigger.Drifted, s.Name)
		}
	}
	for _, name := range d.AlarmDrifted {
		if !slices.Contains(r.Trigger.Drifted, name) {
			r.Trigger.Drifted = append(r.Trigger.Drifted, name)
		}
	}
	r.To = c.cfg.Artifacts.NextVersion(svc.Model.Name, cur)
	r.Job = fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	for {
		// A job name left by an earlier generation is not reused.
		if _, err := c.cfg.Catalog.Jobs.Value(r.Job); errors.Is(err, mesh.ErrNotFound) {
			break
		}
		seq++
		r.Seq, r.Job = seq, fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	}
	src, err := retrainSource(p, r.Job, svc.Model.Name, cur, r.To)
	if err != nil {
		endUnpromoted(r, catalog.StageFailed, "retrain template: %v", err)
		return err
	}
	job := catalog.Policy{Kind: policy.KindTrainingJob, Name: r.Job, Source: src, File: p.File, Generation: 1, Applied: time.Now().UTC(), AppliedAt: c.cfg.Mesh.Name(), Site: p.Site}
	if _, err := c.cfg.Catalog.Policies.Put(job); err != nil {
		return err
	}
	step(r, catalog.StageRetraining, "drift at %s/%s on %s@%s (%s %s=%.4g after %d samples); training %s@%s as job %s",
		d.Site, d.Node, r.Model, cur, det, feature, stat, d.AlarmSeen, r.Model, r.To, r.Job)
	c.log.Info("drift detected: retraining", "policy", p.Key(), "site", d.Site, "job", r.Job, "to", r.To)
	return nil
}

// retrainSource writes the TrainingJob document for a service's retrain:
// its spec is the service's retrain: block as written; labels name the
// service, the version it retrains (when known) and the model version the
// job registers.
func retrainSource(p catalog.Policy, job, model, from, version string) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(p.Source), &root); err != nil {
		return "", err
	}
	spec := mapValue(mapValue(root.Content[0], "spec"), "retrain")
	if spec == nil {
		return "", fmt.Errorf("%s has no spec.retrain", p.Key())
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str"} }
	labels := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str(catalog.LabelRetrainOf), str(p.Name), str(catalog.LabelOutputModel), str(model), str(catalog.LabelOutputVersion), str(version),
	}}
	if from != "" {
		labels.Content = append(labels.Content, str(catalog.LabelRetrainFrom), str(from))
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("apiVersion"), str("strata/v1"),
		str("kind"), str(policy.KindTrainingJob),
		str("metadata"), {Kind: yaml.MappingNode, Content: []*yaml.Node{str("name"), str(job), str("labels"), labels}},
		str("spec"), spec,
	}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	if _, err := policy.Parse(p.File, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Mesh is what the controller reads and writes of the mesh.
type Mesh interface {
	Name() string
	Nodes() []mesh.Node
	Local() mesh.NodeState
	Update(fn func(*mesh.NodeState)) error
	Changed() <-chan struct{}
}

// Artifacts is what rollouts need of the artifact component.
type Artifacts interface {
	Lookup(kind storage.Kind, name, version string) (storage.Manifest, error)
	ByDigest(digest string, kinds ...storage.Kind) (storage.Manifest, error)
	NextVersion(name, after string) string
}

var _ Artifacts = (*artifacts.Service)(nil)

// Config configures a Controller. Every field but Logger and Guard is
// required.
type Config struct {
	Mesh      Mesh
	Catalog   *catalog.Catalog
	Artifacts Artifacts
	// Compile turns an applied policy into a placement request.
	Compile func(catalog.Policy) (*placement.Request, error)
	// Load computes this node's load from its capabilities and the
	// assignments it holds (published with them).
	Load func(caps mesh.Capabilities, held []mesh.Assignment) mesh.Load
	// Federated is set where each site is its own pool: then this
	// agent's controllers place only the policies applied in its site
	// (Policy.Site), since they see no other site's nodes.
	Federated bool
	// HandOff, when set (federated only), picks another site for a
	// policy that no node of this site can take, from the other sites'
	// summaries: its name and why, or "" to keep it here, failed.
	HandOff func(p catalog.Policy, req *placement.Request) (site, why string)
	// RemoteSites, when set (federated only), lists the other sites, with
	// their RTT from this one: a policy placed here may name their
	// clients (RemoteClients).
	RemoteSites func() []mesh.Site
	Logger      *slog.Logger
	// Registerer, when set, takes the controller's metrics: how long each
	// step of a pass takes (strata_controller_pass_seconds{step}), its
	// pauses, and the retrains and rollouts of the services it owns
	// (strata_retrains_started_total{service},
	// strata_retrains_total{service,outcome},
	// strata_rollouts_total{service,outcome}).
	Registerer prometheus.Registerer
	// Guard recovers panics of the component's background work (logged,
	// counted). Nil: a guard of its own that logs to Logger and exports
	// no metric.
	Guard *safe.Guard
}

// RemoteClients turns the other sites of a federated mesh, as seen from
// site here, into the placement engine's client sites: each is its RTT
// from here (mesh.Site.RTTMillis: measured by the sites' gateways, or
// estimated from their WAN coordinates) further than here. An
// unreachable site is an unreachable client, with no distance; a site
// without an RTT yet stays an unknown client.
func RemoteClients(here string, sites []mesh.Site) []placement.RemoteClient {
	var out []placement.RemoteClient
	for _, s := range sites {
		if s.Name == here {
			continue
		}
		if s.Status == mesh.SiteUnreachable {
			out = append(out, placement.RemoteClient{Name: s.Name, Via: here, Unreachable: true})
			continue
		}
		if s.RTTMillis == nil || *s.RTTMillis < 0 {
			continue
		}
		out = append(out, placement.RemoteClient{Name: s.Name, Via: here, RTT: time.Duration(*s.RTTMillis * float64(time.Millisecond))})
	}
	slices.SortFunc(out, func(a, b placement.RemoteClient) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// policies returns every applied policy that decodes (the catalog counts
// the others).
func (c *Controller) policies() []catalog.Policy {
	out, _ := c.cfg.Catalog.Policies.Values()
	if c.cfg.Federated {
		site := c.cfg.Mesh.Local().Site
		out = slices.DeleteFunc(out, func(p catalog.Policy) bool { return p.Site != "" && p.Site != site })
	}
	return out
}

// placements returns every placement record, by key.
func (c *Controller) placements() map[string]catalog.Placement {
	out, _ := c.cfg.Catalog.Placements.Map()
	return out
}

// readyPlacements returns the placement records whose dependencies (the
// policy version they placed) have replicated here, by key. A record that
// arrived before its policy waits for the next change: replication lag is
// not an error.
func (c *Controller) readyPlacements() map[string]catalog.Placement {
	out, _ := c.cfg.Catalog.Placements.ReadyMap()
	return out
}

// drifts returns every node's drift records.
func (c *Controller) drifts() []catalog.Drift {
	out, _ := c.cfg.Catalog.Drift.Values()
	return out
}

// Compile turns an applied policy into a placement request.
func Compile(p catalog.Policy) (*placement.Request, error) {
	doc, err := p.Document()
	if err != nil {
		return nil, err
	}
	return RequestFor(doc), nil
}

// RequestFor turns a policy document into a placement request. The seed is
// a hash of the policy's key, so the same policy on the same mesh places the
// same way on every agent.
func RequestFor(doc *policy.Document) *placement.Request {
	h := fnv.New64a()
	h.Write([]byte(doc.Key()))
	req := &placement.Request{Key: doc.Key(), Seed: h.Sum64()}
	cons := func(xs []*policy.Expr) {
		for _, x := range xs {
			req.Constraints = append(req.Constraints, x)
		}
	}
	affs := func(as []policy.Affinity) {
		for _, a := range as {
			req.Affinities = append(req.Affinities, placement.Affinity{Expr: a.Expr, Weight: a.Weight})
		}
	}
	res := func(r policy.Resources) placement.Resources {
		out := placement.Resources{CPU: int64(r.CPU), Memory: int64(r.Memory)}
		if r.GPUs != nil {
			out.GPUs, out.GPUModel, out.GPUMemory = r.GPUs.Count, r.GPUs.Model, int64(r.GPUs.Memory)
		}
		return out
	}
	switch {
	case doc.InferenceService != nil:
		s := doc.InferenceService
		req.Kind = placement.Inference
		req.Replicas = s.Replicas
		req.PerClientSite = s.PerClientSite
		req.Resources = res(s.Resources)
		if s.Latency != nil {
			req.Latency = placement.Latency{P99: time.Duration(s.Latency.P99), Clients: s.Latency.Clients}
		}
		req.Tiers = s.Tiers
		req.Spread = placement.Spread(s.Spread)
		if s.Model.Digest != "" {
			req.Data = append(req.Data, placement.DataRef{Digest: s.Model.Digest})
		}
		cons(s.Constraints)
		affs(s.Affinities)
	case doc.TrainingJob != nil:
		s := doc.TrainingJob
		req.Kind = placement.Training
		req.Resources = res(s.Resources)
		req.Resources.GPUs = s.Gang.GPUsPerNode
		req.Gang = placement.Gang{Nodes: s.Gang.Nodes, GPUsPerNode: s.Gang.GPUsPerNode, SameFabric: s.Gang.Fabric == "same" && s.Gang.Nodes > 1}
		req.Tiers = s.Tiers
		for _, d := range s.Data {
			req.Data = append(req.Data, placement.DataRef{Digest: d.Artifact, Dataset: d.Dataset, Bytes: int64(d.Size)})
		}
		cons(s.Constraints)
		affs(s.Affinities)
	}
	return req
}

// alarmFeature names the feature a drift alarm is about.
func alarmFeature(d catalog.Drift) string {
	f, _, _ := d.AlarmCause()
	return f
}

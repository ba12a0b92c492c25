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
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
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
	// passWrites counts the placement records written since reconcile's
	// pass began, and resume is where in the list of policies the next
	// pass starts (see maxPassWrites).
	passWrites, resume int
	// here are the placements that name this node, as read by
	// placedRead (admit only): what admission needs of each.
	here       map[string]placedHere
	placedRead catalog.Cursor
	// ready is the version of each placement in here whose policy had
	// replicated here when admit last looked (admit only): a version
	// that was ready stays so, as versions only grow.
	ready map[string]uint64
	// lastTry is when an owned, not fully placed policy was last placed;
	// tries counts the retries since that came to the same placement (see
	// retryDelay).
	lastTry map[string]time.Time
	tries   map[string]int
	// serviceOwners and trainingOwners are the agents that own policies
	// by the last view of the mesh noted, at viewAt, and downSince is when
	// each controller-capable agent was first seen failed or cut off (the
	// controller's goroutine only; see noteView).
	serviceOwners, trainingOwners ownerSet
	// ownersSeen counts the changes of either set (see policies).
	ownersSeen uint64
	viewAt     time.Time
	downSince  map[string]time.Time
	// failedSince is when this controller first saw each failed node
	// failed (reconcile's goroutine only).
	failedSince map[string]time.Time
	// cutSince is when this controller first saw each unreachable site
	// (see noteCut); lost names those unreachable for SiteLostAfter.
	cutSince map[string]time.Time
	lost     map[string]bool
	// holding says why each training job that needs placing waits
	// (reconcile's goroutine only; see holdJob).
	holding map[string]string
	// settleUntil is when this controller's view of the mesh is current
	// again after a start or a pause (see settle); Run's goroutine only.
	settleUntil time.Time
	// liveNodes names the nodes alive or suspect in the last pass
	// (reconcile's goroutine only): a change resets retryDelay.
	liveNodes string
	// cleaned is what the last clean-up of deleted policies' placements
	// saw, when it left nothing to do again (reconcile's goroutine only).
	cleaned cleanView
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
	docs map[policyID]factsOf
	// shared are docFacts that policies alike share (see shareFacts).
	shared map[plainFacts]*docFacts
	// listed is the policies this agent owns as last listed, at the
	// policy table's version listedAt and the owners' listedOwners (see
	// policies; Run's goroutine only).
	listed       []*catalog.Policy
	listedAt     uint64
	listedOwners uint64
	// retrain is the inference services of listed with a retrain block
	// (see retrainPolicies; Run's goroutine only), valid while retrainOK
	// and the listing is at retrainAt and retrainOwners.
	retrain       []catalog.Policy
	retrainAt     uint64
	retrainOwners uint64
	retrainOK     bool
	// scaleLow are the autoscaled services whose load asks for fewer
	// replicas, since when (see autoscale); only reconcile uses it.
	scaleLow map[string]scaleLow
	// roomSince is when the tiers of each service with burst replicas
	// had room for them again; returning are the services placed again
	// to bring them back (see burstBack).
	roomSince map[string]time.Time
	returning map[string]bool

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

// New returns a controller; nothing runs until Run.
func New(cfg Config) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, held: map[string]mesh.Assignment{}, here: map[string]placedHere{}, ready: map[string]uint64{}, lastTry: map[string]time.Time{}, tries: map[string]int{}, failedSince: map[string]time.Time{}, holding: map[string]string{}, docs: map[policyID]factsOf{}, shared: map[plainFacts]*docFacts{}, scaleLow: map[string]scaleLow{}, roomSince: map[string]time.Time{}, returning: map[string]bool{},
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
			ns[i] = meshview.Node(n)
		}
		if r.c.cfg.RemoteSites != nil {
			r.c.live.SetRemoteClients(meshview.RemoteClients(r.c.cfg.Mesh.Local().Site, r.c.cfg.RemoteSites()))
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
	// SiteLostAfter is how long a site may answer nothing before its
	// replicas that serve clients elsewhere are placed again (see
	// needsPlacement). Default DefaultSiteLostAfter.
	SiteLostAfter time.Duration
}

// DefaultSiteLostAfter is Config.SiteLostAfter's default: longer than a
// link's usual outage, so a site cut off for a while comes back to the
// replicas it had, and as long as Kubernetes waits before it evicts the
// pods of a node that stopped answering.
const DefaultSiteLostAfter = 5 * time.Minute

// policies returns the applied policies that decode (the catalog counts
// the others) and that this agent owns by the owners last noted, settled
// or not (ownerOf): every step acts on those alone. Only they are decoded:
// at 10,000 policies, every agent holding every policy decoded was an
// eighth of its heap.
func (c *Controller) policies() []*catalog.Policy {
	ps, _, _ := c.policiesAt()
	return ps
}

// policiesAt is policies, and the policies table's version they were
// listed at, where the table counts its changes (versioned): a listing
// holds what that version held or newer.
func (c *Controller) policiesAt() (ps []*catalog.Policy, v uint64, versioned bool) {
	// Each step of a pass reads the policies. Listed once while the
	// table and the owners stay the same: at 10,000 policies the copies
	// of four listings a pass were most of the controller's garbage.
	v, versioned = c.cfg.Catalog.Policies.Version()
	if versioned && c.listed != nil && v == c.listedAt && c.ownersSeen == c.listedOwners {
		return c.listed, v, true
	}
	me, site := c.cfg.Mesh.Name(), c.cfg.Mesh.Local().Site
	out := []*catalog.Policy{}
	keys := c.cfg.Catalog.Policies.Keys()
	for _, key := range keys {
		if c.ownerOf(key) != me {
			continue
		}
		p, err := c.cfg.Catalog.Policies.SharedValue(key)
		if err != nil {
			continue // deleted since, or does not decode (counted)
		}
		if c.cfg.Federated && p.Site != "" && p.Site != site {
			continue
		}
		out = append(out, p)
	}
	c.forgetFacts(out, keys)
	if versioned {
		c.listed, c.listedAt, c.listedOwners = out, v, c.ownersSeen
	}
	return out, v, versioned
}

// retrainPolicies returns the inference services with a retrain block,
// kept while the policy table stays the same: a rollouts step on each
// pass asked every policy's facts to find the few, 5% of an idle agent's
// CPU at 10,000 policies.
func (c *Controller) retrainPolicies() []catalog.Policy {
	ps := c.policies()
	v, versioned := c.cfg.Catalog.Policies.Version()
	if versioned && c.retrainOK && v == c.retrainAt && c.ownersSeen == c.retrainOwners {
		return c.retrain
	}
	var out []catalog.Policy
	for _, p := range ps {
		if p.Kind == policy.KindInferenceService && c.facts(*p).retrain {
			out = append(out, *p)
		}
	}
	c.retrain, c.retrainAt, c.retrainOwners, c.retrainOK = out, v, c.ownersSeen, versioned
	return out
}

// drifts returns every node's drift records.
func (c *Controller) drifts() []catalog.Drift {
	out, _ := c.cfg.Catalog.Drift.Values()
	return out
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// controller places the policies this agent owns and admits (or refuses)
// the assignments that name this node. One goroutine runs it.
type controller struct {
	a *Agent

	mu     sync.Mutex
	ledger *placement.Ledger
	// held maps policy key → the epoch admitted (or refused) here.
	held map[string]mesh.Assignment
	// lastTry is when an owned, not fully placed policy was last placed.
	lastTry map[string]time.Time
}

// retryEvery is how often an owner retries a policy it could not fully
// place, when nothing in the mesh changed.
const retryEvery = 5 * time.Second

func newController(a *Agent) *controller {
	return &controller{a: a, held: map[string]mesh.Assignment{}, lastTry: map[string]time.Time{}}
}

func (c *controller) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		changed := c.a.mesh.Changed()
		c.reconcile()
		c.admit()
		c.rollouts()
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

// policies returns every applied policy that decodes (the others are
// counted by the catalog and logged once).
func (a *Agent) policies() []PolicyRecord {
	out, err := a.cat.Policies.Values()
	a.decodeErrors(err)
	return out
}

// placements returns every placement record, by key.
func (a *Agent) placements() map[string]PlacementRecord {
	recs, err := a.cat.Placements.Values()
	a.decodeErrors(err)
	out := make(map[string]PlacementRecord, len(recs))
	for _, p := range recs {
		out[p.Key] = p
	}
	return out
}

// readyPlacements returns the placement records whose dependencies (the
// policy version they placed) have replicated here, by key. A record that
// arrived before its policy waits for the next change: replication lag is
// not an error.
func (a *Agent) readyPlacements() map[string]PlacementRecord {
	recs, err := a.cat.Placements.List()
	a.decodeErrors(err)
	out := make(map[string]PlacementRecord, len(recs))
	for _, r := range recs {
		if missing := a.cat.Placements.Pending(r); len(missing) > 0 {
			a.log.Debug("placement pending: its policy has not replicated here yet", "policy", r.Key, "missing", missing[0].Key)
			continue
		}
		out[r.Key] = r.Value
	}
	return out
}

// decodeErrors logs each catalog record that does not decode, once per
// record version (the catalog counts them in a metric).
func (a *Agent) decodeErrors(err error) {
	if err == nil {
		return
	}
	a.decodeMu.Lock()
	defer a.decodeMu.Unlock()
	if a.decodeSeen == nil {
		a.decodeSeen = map[string]bool{}
	}
	for _, e := range unjoin(err) {
		if msg := e.Error(); !a.decodeSeen[msg] {
			a.decodeSeen[msg] = true
			a.log.Warn("ignoring an unreadable catalog record", "err", msg)
		}
	}
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// controllers returns the names of live controller-capable nodes.
func controllers(nodes []mesh.Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Controller && n.Status == mesh.StatusAlive {
			out = append(out, n.Name)
		}
	}
	return out
}

// reconcile places every policy this agent owns whose placement is
// missing, stale, or lost a node.
func (c *controller) reconcile() {
	a := c.a
	nodes := a.mesh.Nodes()
	owners := controllers(nodes)
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	recs := a.placements()
	for _, p := range a.policies() {
		key := p.Key()
		if placement.Owner(key, owners) != a.cfg.Name {
			continue
		}
		rec, have := recs[key]
		if p.Kind == policy.KindTrainingJob {
			if j, err := a.job(p.Name); err == nil && j.Generation == p.Generation && j.Terminal() {
				if !have || rec.State != StateDone {
					rec = PlacementRecord{Key: key, Kind: p.Kind, Name: p.Name, Owner: a.cfg.Name, Epoch: rec.Epoch + 1, Generation: p.Generation,
						State: StateDone, Message: fmt.Sprintf("job %s on %s; its nodes are released", j.State, j.Node), Updated: time.Now().UTC()}
					c.write(rec)
				}
				continue
			}
		}
		need, why := c.needsPlacement(p, rec, have, byName)
		if !need {
			if have && rec.State == StatePending && allAdmitted(rec, byName) {
				rec.State, rec.Message, rec.Updated = StatePlaced, "every node admitted the work", time.Now().UTC()
				c.write(rec)
			}
			continue
		}
		c.place(p, rec, have, nodes, why)
	}
	// Placements of deleted policies: the owner of the key removes them.
	for key := range recs {
		if _, err := a.cat.Policies.Get(key); errors.Is(err, catalog.ErrNotFound) && placement.Owner(key, owners) == a.cfg.Name {
			_ = a.cat.Placements.Delete(key)
		}
	}
}

func (c *controller) needsPlacement(p PolicyRecord, rec PlacementRecord, have bool, byName map[string]mesh.Node) (bool, string) {
	switch {
	case !have:
		return true, "new policy"
	case rec.Generation != p.Generation:
		return true, "policy changed"
	}
	for _, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if !ok || n.Status == mesh.StatusFailed || n.Status == mesh.StatusLeft {
			return true, fmt.Sprintf("node %s is %s", pn.Name, statusOr(n.Status, "gone"))
		}
		if as, ok := assignmentOf(n, rec.Key); ok && as.Epoch == rec.Epoch && !as.Accepted {
			return true, fmt.Sprintf("node %s refused: %s", pn.Name, as.Reason)
		}
	}
	if rec.State == StateFailed || len(rec.Nodes) < rec.Wanted {
		c.mu.Lock()
		due := time.Since(c.lastTry[rec.Key]) > retryEvery
		c.mu.Unlock()
		if due {
			return true, "retrying an incomplete placement"
		}
	}
	return false, ""
}

func statusOr(s mesh.Status, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}

func assignmentOf(n mesh.Node, key string) (mesh.Assignment, bool) {
	for _, as := range n.Assignments {
		if as.Key == key {
			return as, true
		}
	}
	return mesh.Assignment{}, false
}

func allAdmitted(rec PlacementRecord, byName map[string]mesh.Node) bool {
	for _, pn := range rec.Nodes {
		as, ok := assignmentOf(byName[pn.Name], rec.Key)
		if !ok || as.Epoch != rec.Epoch || !as.Accepted {
			return false
		}
	}
	return len(rec.Nodes) > 0
}

// place runs the engine for p and writes the new placement record.
func (c *controller) place(p PolicyRecord, old PlacementRecord, have bool, nodes []mesh.Node, why string) {
	a := c.a
	c.mu.Lock()
	c.lastTry[p.Key()] = time.Now()
	c.mu.Unlock()
	req, err := a.compile(p)
	rec := PlacementRecord{Key: p.Key(), Kind: p.Kind, Name: p.Name, Owner: a.cfg.Name, Generation: p.Generation, Updated: time.Now().UTC(), Refused: map[string]string{}}
	if have {
		rec.Epoch = old.Epoch
		for k, v := range old.Refused {
			rec.Refused[k] = v
		}
	}
	rec.Epoch++
	if err != nil {
		rec.State, rec.Message = StateFailed, err.Error()
		c.write(rec)
		return
	}
	// Nodes that refused this policy before are not asked again until
	// their load changes; nodes that hold it keep their share.
	for _, n := range nodes {
		if as, ok := assignmentOf(n, rec.Key); ok && !as.Accepted && have && as.Epoch == old.Epoch {
			rec.Refused[n.Name] = as.Reason
		}
	}
	for name := range rec.Refused {
		req.Exclude = append(req.Exclude, name)
	}
	sort.Strings(req.Exclude)
	snap, err := snapshotOf(nodes, rec.Key)
	if err != nil {
		rec.State, rec.Message = StateFailed, err.Error()
		c.write(rec)
		return
	}
	dec, err := placement.Place(snap, req)
	if err != nil {
		rec.State, rec.Message = StateFailed, err.Error()
		c.write(rec)
		return
	}
	rec.Resources, rec.Wanted = req.Resources, dec.Wanted
	rec.Fallbacks, rec.Rejected = dec.Fallbacks, dec.Rejected
	for _, pl := range dec.Placements {
		rec.Nodes = append(rec.Nodes, PlacedNode{Name: pl.Node, ID: pl.NodeID, Tier: pl.Tier, Site: pl.Site, Rank: pl.Rank})
	}
	switch {
	case len(rec.Nodes) == 0 || (req.Kind == placement.Training && !dec.Feasible):
		rec.State, rec.Nodes = StateFailed, nil
		rec.Message = "no feasible placement: " + summarizeRejections(dec)
	case !dec.Feasible:
		rec.State = StatePending
		rec.Message = fmt.Sprintf("placed %d of %d (%s)", len(rec.Nodes), dec.Wanted, why)
	default:
		rec.State = StatePending
		rec.Message = fmt.Sprintf("placed on %d node(s) (%s); waiting for admission", len(rec.Nodes), why)
	}
	a.log.Info("placed policy", "policy", rec.Key, "epoch", rec.Epoch, "state", rec.State, "nodes", rec.NodeNames(), "why", why)
	c.write(rec)
}

func summarizeRejections(d *placement.Decision) string {
	type kv struct {
		r placement.Reason
		n int
	}
	var rs []kv
	for r, n := range d.Rejected {
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
	if len(d.Fallbacks) > 0 {
		parts = append(parts, d.Fallbacks[len(d.Fallbacks)-1].Message)
	}
	return strings.Join(parts, "; ")
}

// write records a placement, derived from the policy version held here:
// a node that learns the placement before the policy waits for it.
func (c *controller) write(rec PlacementRecord) {
	var deps []mesh.Dep
	if ref, ok := c.a.cat.Policies.Ref(rec.Key); ok {
		deps = append(deps, ref)
	}
	if _, err := c.a.cat.Placements.Put(rec, deps...); err != nil {
		c.a.log.Warn("writing placement", "policy", rec.Key, "err", err)
	}
}

// snapshotOf builds the engine's view of the mesh. Resources this policy
// already holds on a node count as free for it, so re-placing keeps what
// still fits.
func snapshotOf(nodes []mesh.Node, key string) (*placement.Snapshot, error) {
	var b placement.Builder
	for _, n := range nodes {
		pn := placement.Node{
			ID: n.ID, Name: n.Name, Tier: n.Tier, Site: n.Site, Region: n.Region,
			Rack: n.Labels["rack"], Labels: n.Labels, Arch: n.Capabilities.CPU.Arch,
			CPU: n.Capabilities.CPU.Millicores, FreeCPU: n.Load.FreeCPU,
			Memory: n.Capabilities.Memory.Total, FreeMemory: n.Load.FreeMemory,
			Fabric: n.Capabilities.Fabric, Alive: n.Status == mesh.StatusAlive, Coord: n.Coord,
			Artifacts: n.Locality.Artifacts, Datasets: n.Locality.Datasets,
		}
		held := map[int]bool{}
		for _, as := range n.Assignments {
			if !as.Accepted {
				continue
			}
			if as.Key == key {
				pn.FreeCPU += as.CPU
				pn.FreeMemory += as.Memory
				continue
			}
			for _, g := range as.GPUs {
				held[g] = true
			}
		}
		for _, g := range n.Capabilities.GPUs {
			pn.GPUs = append(pn.GPUs, placement.GPU{Model: g.Model, Memory: g.Memory, Healthy: g.Healthy, Free: !held[g.Index]})
		}
		b.Add(pn)
	}
	return b.Build()
}

// admit answers every placement that names this node: admitted against
// the node's ledger, or refused; and releases what no placement names any
// more. The answers are published in the node's document.
func (c *controller) admit() {
	a := c.a
	self := a.mesh.Local()
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
	wanted := map[string]PlacementRecord{}
	for key, rec := range a.readyPlacements() {
		for _, pn := range rec.Nodes {
			if pn.Name == a.cfg.Name {
				wanted[key] = rec
			}
		}
	}
	// Release what is no longer ours, or was placed again at a newer epoch.
	for key, as := range c.held {
		rec, ok := wanted[key]
		if ok && rec.Epoch == as.Epoch {
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
			a.log.Info("refused assignment", "policy", key, "epoch", rec.Epoch, "reason", as.Reason)
		} else {
			as.Accepted, as.CPU, as.Memory, as.GPUs = true, rec.Resources.CPU, rec.Resources.Memory, grant.GPUs
			a.log.Info("admitted assignment", "policy", key, "epoch", rec.Epoch)
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
	if err := a.mesh.Update(func(s *mesh.NodeState) { s.Assignments, s.Load = list, a.loadFrom(s.Capabilities, list) }); err != nil {
		a.log.Warn("publishing assignments", "err", err)
	}
}

func assignmentID(key string, epoch uint64) string { return fmt.Sprintf("%s@%d", key, epoch) }

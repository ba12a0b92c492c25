package controller

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

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
	if away := meshview.UnreachableControllers(nodes); len(away) > 0 {
		return fmt.Sprintf("no controller-capable agent is reachable (%s): only they place training jobs, so that no job is placed on both sides of a cut", strings.Join(away, ", "))
	}
	for _, n := range nodes {
		as, ok := meshview.AssignmentOf(n, key)
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
		if as, ok := meshview.AssignmentOf(n, key); ok {
			e = max(e, as.Epoch)
		}
	}
	return e
}

// maxPassWrites and maxPassTime bound one reconcile pass: once it wrote
// that many placement records, or ran that long and wrote one, the rest
// wait for the next pass, which follows as soon as the writes land. Each
// write waits its turn for the mesh, and on a busy host a pass that placed the
// hundreds of policies a burst of applies brings took seconds, with this
// node's admissions, rollouts and sweeps waiting behind it.
const (
	maxPassWrites = 128
	maxPassTime   = 500 * time.Millisecond
)

// reconcile places every policy this agent owns whose placement is
// missing, stale, or lost a node, up to maxPassWrites records a pass.
func (c *Controller) reconcile() {
	nodes := c.cfg.Mesh.Nodes()
	if len(nodes) > 1 && time.Now().Before(c.settleUntil) {
		return // see settle
	}
	c.noteView(nodes, time.Now())
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	cut := cutOrCutting(nodes)
	c.noteCut(cut, time.Now())
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
	view := &round{c: c, nodes: nodes, byName: byName}
	ps, psAt, psVersioned := c.policiesAt()
	c.passWrites = 0
	begun, full := time.Now(), false
	// Each pass starts where the last one stopped (see maxPassWrites),
	// so that what a busy pass left is not left again.
	first := c.resume % max(len(ps), 1)
	for i := range ps {
		p := *ps[(first+i)%len(ps)] // a copy: the catalog's own is shared
		key := p.Key()
		// The time bound once something is written: on a starved host
		// the pass may pass it before its first write, and must still
		// make progress.
		if !full && (c.passWrites >= maxPassWrites || c.passWrites > 0 && time.Since(begun) > maxPassTime) {
			full, c.resume = true, (first+i)%len(ps)
		}
		if full || !c.owns(key) {
			continue // the next pass goes on from here
		}
		// Only the placements of owned policies are read: with thousands
		// of policies, copying every record each pass was most of it. Nor
		// are those copied whole: a pass that changes nothing (the most
		// of them) changes no list or map of the record, and what does
		// builds a new record or copies what it changes (noteReplicas).
		// The copies were most of what an idle agent allocated at
		// 10,000 policies.
		var rec catalog.Placement
		shared, err := c.cfg.Catalog.Placements.SharedValue(key)
		have := err == nil
		if have {
			rec = *shared
		}
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
			if n := burstCount(rec.Nodes); n > 0 {
				rec.Message += fmt.Sprintf("; %d on burst tiers: the service's tiers had no room within the SLO", n)
			}
			if note := scaleNote(rec.Scale); note != "" {
				rec.Message += "; " + note
			}
			c.write(rec)
		}
		if have && p.Kind == policy.KindInferenceService && rec.State == catalog.StatePlaced && noteReplicas(&rec, byName) {
			c.write(rec)
		}
		if f := c.facts(p); f.autoscale != nil && have && rec.State == catalog.StatePlaced && rec.Generation == p.Generation {
			var clients []string
			if f.perSite {
				clients = f.clients
			}
			if scaled, why, ok := c.autoscale(f.autoscale, rec, clients, byName, time.Now()); ok {
				c.log.Info("autoscaling", "policy", key, "from", scaled.Scale.From, "to", scaled.Scale.Replicas, "why", scaled.Scale.Reason)
				c.place(p, scaled, true, view, cut, why)
				continue
			}
		}
		if b := c.facts(p).burst; b != nil && have && rec.State == catalog.StatePlaced && rec.Generation == p.Generation && bursting(rec, byName) {
			if why, ok := c.burstBack(p, b, rec, view, time.Now()); ok {
				c.log.Info("bringing burst replicas back", "policy", key, "why", why)
				c.returning[key] = true
				c.place(p, rec, true, view, cut, why)
				continue
			}
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
	c.cleanUp(ps, psAt, psVersioned)
}

// cleanView is the tables' versions and the live nodes a clean-up saw.
type cleanView struct {
	placements, policies uint64
	live                 string
}

// cleanUp removes the placements of deleted policies that this agent
// owns. Only ready ones: a placement that reached this agent before its
// policy (a sync after a cut) waits for it, and deleting it would delete
// it everywhere, stopping the job or service it placed. It lists the
// placements only when they, the policies or the owners may have
// changed since a clean-up that left nothing to do: listing them each
// pass was 5% of an idle agent's CPU at 10,000 policies. ps are the
// policies of this pass, listed at version psAt of their table (see
// policiesAt): the version a clean-up notes is the one ps were listed
// at, not the table's now. A policy deleted while a pass placed others
// is in ps; noted at the version that deleted it, its placement was
// never cleaned up (seen under the race detector: a deleted service
// still placed 20 s later).
func (c *Controller) cleanUp(ps []*catalog.Policy, psAt uint64, psVersioned bool) {
	pv, ok := c.cfg.Catalog.Placements.Version()
	view := cleanView{placements: pv, policies: psAt, live: c.liveNodes}
	versioned := ok && psVersioned
	if versioned && c.cleaned == view {
		return
	}
	applied := make(map[string]bool, len(ps)) // made here, not each pass: most passes return above
	for _, p := range ps {
		applied[p.Key()] = true
	}
	done := true
	for _, key := range c.cfg.Catalog.Placements.Keys() {
		if applied[key] || c.ownerOf(key) != c.cfg.Mesh.Name() {
			continue
		}
		r, err := c.cfg.Catalog.Placements.Get(key)
		if err != nil || len(c.cfg.Catalog.Placements.Pending(r)) > 0 {
			done = false
			continue
		}
		if _, err := c.cfg.Catalog.Policies.Get(key); errors.Is(err, catalog.ErrNotFound) {
			if c.cfg.Catalog.Placements.Delete(key) != nil {
				done = false
			}
		}
	}
	if versioned && done {
		c.cleaned = view
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

// needsPlacement says whether p must be placed (again), and why. A failed
// node of an unreachable site (cut, every node gone) is not a reason: a
// replica there serves that site's clients, who are cut off with it, and
// a site cut off for a while comes back to what it had. From outside, a
// site cut off and a site whose every node died look the same: once the
// site has answered nothing for SiteLostAfter (lost), an inference
// replica there that serves clients elsewhere (or none named) is placed
// again where they are served, retried with backoff while nothing outside
// the site can take it. A job stays: it may still be running there.
func (c *Controller) needsPlacement(p catalog.Policy, rec catalog.Placement, have bool, byName map[string]mesh.Node, cut map[string]bool) (bool, string) {
	switch {
	case !have:
		return true, "new policy"
	case rec.Generation != p.Generation:
		return true, "policy changed"
	}
	due := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return time.Since(c.lastTry[rec.Key]) > retryDelay(c.tries[rec.Key])
	}
	for _, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if ok && (n.Status == mesh.StatusUnreachable || n.Status == mesh.StatusFailed && cut[n.Site]) {
			if p.Kind != policy.KindInferenceService || !c.lost[n.Site] || servesSite(c.facts(p).clients, pn, n) || !due() {
				continue
			}
			return true, fmt.Sprintf("node %s's site %s has answered nothing for %s, and the service's clients are elsewhere", pn.Name, n.Site, c.siteLostAfter())
		}
		if ok && n.Status == mesh.StatusFailed && p.Kind == policy.KindTrainingJob && time.Since(c.failedSince[n.Name]) < JobGrace {
			// The node may be cut off or paused with the job running: it
			// stops the run (or will not record it) once its lease lapses.
			continue
		}
		if !ok || n.Status == mesh.StatusFailed || n.Status == mesh.StatusLeft {
			return true, fmt.Sprintf("node %s is %s", pn.Name, statusOr(n.Status, "gone"))
		}
		if as, ok := meshview.AssignmentOf(n, rec.Key); ok && as.Epoch == rec.Epoch && !as.Accepted {
			// A stale-epoch refusal says a newer placement exists: placed
			// again, the policy takes an epoch after it, on the same node.
			return true, fmt.Sprintf("node %s refused: %s", pn.Name, as.Reason)
		}
	}
	if (rec.State == catalog.StateFailed || len(rec.Nodes) < rec.Wanted || rec.State == catalog.StatePending && len(rec.Nodes) == 0) && due() {
		return true, "retrying an incomplete placement"
	}
	return false, ""
}

// noteCut records since when each site of cut has been unreachable, and
// which of them are lost: unreachable for SiteLostAfter.
func (c *Controller) noteCut(cut map[string]bool, now time.Time) {
	since := make(map[string]time.Time, len(cut))
	lost := map[string]bool{}
	for site := range cut {
		since[site] = cmp.Or(c.cutSince[site], now)
		lost[site] = now.Sub(since[site]) >= c.siteLostAfter()
	}
	c.cutSince, c.lost = since, lost
}

// siteLostAfter is Config.SiteLostAfter or its default.
func (c *Controller) siteLostAfter() time.Duration {
	return cmp.Or(c.cfg.SiteLostAfter, DefaultSiteLostAfter)
}

// servesSite says whether a replica on node n serves clients in n's site:
// it was placed for that client site, or the service names the site or
// its region among its clients.
func servesSite(clients []string, pn catalog.PlacedNode, n mesh.Node) bool {
	return pn.Client != "" && pn.Client == n.Site || slices.Contains(clients, n.Site) || n.Region != "" && slices.Contains(clients, n.Region)
}

// noteReplicas records in rec what each of its nodes that this agent sees
// reports of the service's replica (loading, serving, failed and why),
// and says whether that changed. The record travels to every site: an
// agent of another site, which sees none of these nodes, tells from it
// whether the service serves (GET /v1/placements), as this site's do.
// It changes a copy of rec's list of nodes, never the list rec came with.
func noteReplicas(rec *catalog.Placement, byName map[string]mesh.Node) bool {
	changed := false
	for i, pn := range rec.Nodes {
		n, known := byName[pn.Name]
		if !known {
			continue
		}
		if r, ok := n.Replica(rec.Key); ok && (pn.Replica != r.State || pn.Reason != r.Reason) {
			if !changed {
				rec.Nodes = slices.Clone(rec.Nodes) // rec may share its list with the catalog's
			}
			rec.Nodes[i].Replica, rec.Nodes[i].Reason = r.State, r.Reason
			changed = true
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
		as, ok := meshview.AssignmentOf(n, rec.Key)
		if !ok || as.Epoch != rec.Epoch || !as.Accepted || n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect {
			return false
		}
	}
	return len(rec.Nodes) > 0
}

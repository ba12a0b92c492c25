package controller

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// place runs the engine for p and writes the new placement record. An
// inference service placed again at the same generation keeps its healthy
// replicas (see kept) and takes from the decision only what is missing.
func (c *Controller) place(p catalog.Policy, old catalog.Placement, have bool, view *round, cut map[string]bool, why string) {
	nodes := view.nodes
	c.mu.Lock()
	c.lastTry[p.Key()] = time.Now()
	c.mu.Unlock()
	req, err := c.cfg.Compile(p)
	rec := c.newRecord(p, old, have, nodes)
	if err != nil {
		rec.State, rec.Message = catalog.StateFailed, err.Error()
		c.write(rec)
		return
	}
	f := c.facts(p)
	if f.autoscale != nil {
		rec.Scale = scaleRequest(f.autoscale, req, old, have)
	}
	if f.prestage {
		c.modelData(req, f.model)
	}
	// Nodes that refused this policy before are not asked again until
	// their load changes; nodes that hold it keep their share.
	for _, n := range nodes {
		if as, ok := meshview.AssignmentOf(n, rec.Key); ok && !as.Accepted && have && as.Epoch == old.Epoch && !staleRefusal(as) {
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
	meshview.ReleaseHeld(snap, nodes, rec.Key)
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
	rec.Resources, rec.Wanted = catalog.Resources(req.Resources), dec.Wanted
	rec.Fallbacks, rec.Rejected = meshview.Fallbacks(dec.Fallbacks), meshview.Rejections(dec.Rejected)
	fresh, regular, feasible := freshNodes(snap, req, dec, f.burst)
	var keep []catalog.PlacedNode
	var spared bool
	rec.Nodes, keep, spared = c.chooseNodes(p, old, have, view, cut, snap, req, fresh, dec.Wanted, regular == dec.Wanted)
	if spared && sameNodes(old.Nodes, rec.Nodes) {
		// The placement as it was: nothing to write, and the next try
		// waits longer (see needsPlacement).
		c.mu.Lock()
		c.tries[rec.Key]++
		c.mu.Unlock()
		return
	}
	switch {
	case len(rec.Nodes) == 0 || (req.Kind == placement.Training && !dec.Feasible):
		rec.State, rec.Nodes = catalog.StateFailed, nil
		rec.Message = "no feasible placement: " + meshview.SummarizeRejections(rec.Rejected, rec.Fallbacks)
		if c.unchanged(old, have, rec) {
			return
		}
		if c.handOff(p, req, &rec) {
			return
		}
	case len(rec.Nodes) < dec.Wanted || (!feasible && len(keep) == 0):
		rec.State = catalog.StatePending
		rec.Message = partly(rec)
		if c.unchanged(old, have, rec) {
			return
		}
	default:
		rec.State = catalog.StatePending
		rec.Message = fmt.Sprintf("placed on %d node(s) (%s); waiting for admission", len(rec.Nodes), why)
	}
	if n := burstCount(rec.Nodes); n > 0 {
		rec.Message += fmt.Sprintf("; %d on burst tiers: the service's tiers had no room within the SLO", n)
	}
	if note := scaleNote(rec.Scale); note != "" && !strings.Contains(rec.Message, "autoscaled") {
		rec.Message += "; " + note
	}
	if len(keep) > 0 {
		rec.Message += fmt.Sprintf("; kept %d healthy replica(s) where they were", len(keep))
	}
	if names := cutSites(keep, cut); len(names) > 0 {
		rec.Message += fmt.Sprintf("; site(s) %s unreachable: their replicas stay for their clients", strings.Join(names, ", "))
	}
	if rec.State != catalog.StateFailed && f.prestage {
		standbys(snap, req, &rec)
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

// freshNodes are the decision's nodes and, for a service that bursts and
// is short, the overflow tiers' (Burst set). regular counts those within
// the service's own tiers and SLO; feasible says whether all it wants are
// placed.
func freshNodes(snap *placement.Snapshot, req *placement.Request, dec *placement.Decision, burst *policy.Burst) (fresh []catalog.PlacedNode, regular int, feasible bool) {
	for _, pl := range dec.Placements {
		fresh = append(fresh, catalog.PlacedNode{Name: pl.Node, ID: pl.NodeID, Tier: pl.Tier, Site: pl.Site, Rank: pl.Rank, Client: pl.Client})
	}
	regular, feasible = len(fresh), dec.Feasible
	if burst != nil && len(fresh) < dec.Wanted {
		for _, pl := range meshview.Overflow(snap, req, dec, burst) {
			fresh = append(fresh, catalog.PlacedNode{Name: pl.Node, ID: pl.NodeID, Tier: pl.Tier, Site: pl.Site, Client: pl.Client, Burst: true})
		}
		feasible = len(fresh) == dec.Wanted
	}
	return fresh, regular, feasible
}

// newRecord starts p's new placement record: its epoch after every one
// the old record, the nodes and the job's last run have seen, and the
// refusals the old one noted.
func (c *Controller) newRecord(p catalog.Policy, old catalog.Placement, have bool, nodes []mesh.Node) catalog.Placement {
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
	return rec
}

// chooseNodes picks the new placement's nodes from the old one's
// replicas worth keeping (see kept), the standbys that take over failed
// ones, and fresh, the decision's, up to wanted; burst replicas are let go
// once the service's own tiers hold them all (ownTiers). Replicas of a
// cut site that serve clients elsewhere fill in last (spared: some did).
func (c *Controller) chooseNodes(p catalog.Policy, old catalog.Placement, have bool, view *round, cut map[string]bool,
	snap *placement.Snapshot, req *placement.Request, fresh []catalog.PlacedNode, wanted int, ownTiers bool) (nodes, keep []catalog.PlacedNode, spared bool) {
	f := c.facts(p)
	firm, spare := kept(p, f.clients, old, have, view.nodes, cut, c.lost)
	keep = trimKeptFor(req, firm, fresh, wanted)
	if c.returning[p.Key()] && ownTiers {
		keep = slices.DeleteFunc(keep, func(pn catalog.PlacedNode) bool { return pn.Burst })
	}
	delete(c.returning, p.Key())
	if f.prestage && have && old.Generation == p.Generation {
		keep = append(keep, takeStandbys(snap, req, old, keep, view.nodes)...)
	}
	nodes = mergeKept(keep, fresh, wanted)
	for _, sp := range spare {
		// Nothing outside the cut site took its place: it stays.
		if len(nodes) < wanted && !slices.ContainsFunc(nodes, func(pn catalog.PlacedNode) bool { return pn.Name == sp.Name }) {
			nodes, spared = append(nodes, sp), true
		}
	}
	return nodes, keep, spared
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
// nodes that admitted them, and those in unreachable sites but the lost
// ones' that serve clients elsewhere (see needsPlacement). Moving a healthy replica only
// because a fresh decision ranks another node a little higher would make
// a service placed short (or waiting for a failed node's replacement)
// move its replicas back and forth. spare are the replicas in unreachable
// sites that are lost and serve clients elsewhere: kept only where
// nothing outside takes their place.
func kept(p catalog.Policy, clients []string, old catalog.Placement, have bool, nodes []mesh.Node, cut, lost map[string]bool) (firm, spare []catalog.PlacedNode) {
	if !have || old.Generation != p.Generation || p.Kind != policy.KindInferenceService {
		return nil, nil
	}
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for _, pn := range old.Nodes {
		n, ok := byName[pn.Name]
		if !ok {
			continue
		}
		as, held := meshview.AssignmentOf(n, old.Key)
		switch {
		case n.Status == mesh.StatusUnreachable, n.Status == mesh.StatusFailed && cut[n.Site]:
			if lost[n.Site] && !servesSite(clients, pn, n) {
				pn.Admitted, pn.Replica, pn.Reason = false, "", ""
				spare = append(spare, pn)
				continue
			}
		case n.Status == mesh.StatusAlive && held && as.Epoch >= old.Epoch && as.Accepted:
			// Serving this placement, or a newer one whose record has
			// not reached this agent: a replica is never dropped for a
			// stale epoch.
		default:
			continue
		}
		pn.Admitted, pn.Replica, pn.Reason = false, "", ""
		firm = append(firm, pn)
	}
	return firm, spare
}

// mergeKept fills what keep lacks of wanted from fresh. Per client site
// (fresh names clients), each replica kept for a client stands for one of
// fresh's for it (the same node first); otherwise fresh's nodes not kept
// already are added in order.
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
		// Fresh's nodes that are kept already count for their client
		// first; then each kept replica stands for one of fresh's.
		served := map[string]int{}
		for _, k := range keep {
			served[k.Client]++
		}
		isKept := func(f catalog.PlacedNode) bool {
			return slices.ContainsFunc(keep, func(k catalog.PlacedNode) bool { return k.Name == f.Name })
		}
		for _, f := range fresh {
			if isKept(f) && served[f.Client] > 0 {
				served[f.Client]--
			}
		}
		for _, f := range fresh {
			switch {
			case isKept(f):
			case served[f.Client] > 0:
				served[f.Client]--
			default:
				out = append(out, f)
			}
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
		(old.State == catalog.StateFailed) != (rec.State == catalog.StateFailed) || !sameNodes(old.Nodes, rec.Nodes) ||
		!old.Scale.Equal(rec.Scale) {
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
	return fmt.Sprintf("placed %d of %d: %s", len(rec.Nodes), rec.Wanted, meshview.SummarizeRejections(rec.Rejected, rec.Fallbacks))
}

// write records a placement, derived from the policy version held here:
// a node that learns the placement before the policy waits for it. A
// training job's placement is written only while this agent still owns
// the job by a view of the mesh read now: a pass on a busy host can take
// seconds, and an owner that came back meanwhile places the job itself.
func (c *Controller) write(rec catalog.Placement) {
	if strings.HasPrefix(rec.Key, policy.KindTrainingJob+"/") {
		c.noteView(c.cfg.Mesh.Nodes(), time.Now())
		if !c.owns(rec.Key) {
			c.log.Info("not writing placement: the training job is no longer this agent's", "policy", rec.Key, "epoch", rec.Epoch, "owner", c.ownerOf(rec.Key))
			return
		}
	}
	c.passWrites++
	var deps []mesh.Dep
	if ref, ok := c.cfg.Catalog.Policies.Ref(rec.Key); ok {
		deps = append(deps, ref)
	}
	// The nodes it names admit it next: they hear of it at once.
	notify := make([]string, 0, len(rec.Nodes))
	for _, n := range rec.Nodes {
		notify = append(notify, n.Name)
	}
	switch _, err := c.cfg.Catalog.Placements.PutNotify(rec, notify, deps...); {
	case errors.Is(err, mesh.ErrSuperseded):
		// Another owner placed it at a later epoch: that placement
		// stands, and this agent's view was behind.
		c.log.Info("not writing placement: a later epoch is held", "policy", rec.Key, "epoch", rec.Epoch)
	case err != nil:
		c.log.Warn("writing placement", "policy", rec.Key, "err", err)
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
		if as, ok := meshview.AssignmentOf(byName[pl.Node], rec.Key); ok && as.Accepted {
			continue
		}
		_, _ = view.Reserve(pl.Node, pl.Resources)
	}
}

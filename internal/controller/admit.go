package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
)

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
	// The placements that name this node, kept up to date from what
	// changed: scanning every placement each pass was most of admit's
	// time at 10,000 policies.
	recs, gone := c.cfg.Catalog.Placements.Next(&c.placedRead)
	if c.placedRead.Relisted() {
		clear(c.here) // what recs name is all there is
	}
	for _, r := range recs {
		if slices.ContainsFunc(r.Value.Nodes, func(pn catalog.PlacedNode) bool { return pn.Name == self.Name }) {
			c.here[r.Key] = placedHere{version: r.Version, epoch: r.Value.Epoch, resources: r.Value.Resources, deps: r.Deps}
		} else {
			delete(c.here, r.Key)
			delete(c.ready, r.Key)
		}
	}
	for _, key := range gone {
		delete(c.here, key)
		delete(c.ready, key)
	}
	if c.placedRead.Relisted() {
		maps.DeleteFunc(c.ready, func(key string, _ uint64) bool { _, ok := c.here[key]; return !ok })
	}
	for key, h := range c.here {
		// Its policy has replicated here: asked of the mesh once per
		// version, not on every pass (at 10,000 policies, a tenth of an
		// idle agent's CPU, each ask taking the mesh's lock).
		if c.ready[key] != h.version && len(c.cfg.Catalog.Placements.Pending(catalog.Record[catalog.Placement]{Deps: h.deps})) == 0 {
			c.ready[key] = h.version
		}
	}
	// The placements wanted here: those whose policy has replicated. Not
	// gathered into a map of their own each pass: a node that serves
	// thousands held several such maps, of passes under way, at once.
	wanted := func(key string) (placedHere, bool) {
		h, ok := c.here[key]
		return h, ok && c.ready[key] == h.version
	}
	// Release what is no longer ours, or was placed again at a newer
	// epoch. A record of an older epoch than the one held (a lagging
	// owner's, or a copy that arrived late) changes nothing here: the
	// node goes on serving the newer one.
	for key, as := range c.held {
		rec, ok := wanted(key)
		if ok && (rec.epoch == as.Epoch || rec.epoch < as.Epoch && as.Accepted) {
			continue
		}
		if as.Accepted {
			c.ledger.Release(assignmentID(key, as.Epoch))
		}
		delete(c.held, key)
		changed = true
	}
	for key := range c.here {
		rec, ok := wanted(key)
		if _, held := c.held[key]; !ok || held {
			continue
		}
		as := mesh.Assignment{Key: key, Epoch: rec.epoch}
		grant, err := c.ledger.Admit(placement.Assignment{ID: assignmentID(key, rec.epoch), Key: key, Epoch: rec.epoch, Resources: placement.Resources(rec.resources)})
		if err != nil {
			as.Reason = strings.TrimPrefix(err.Error(), "placement: refused: ")
			c.log.Info("refused assignment", "policy", key, "epoch", rec.epoch, "reason", as.Reason)
		} else {
			as.Accepted, as.CPU, as.Memory, as.GPUs = true, rec.resources.CPU, rec.resources.Memory, grant.GPUs
			c.log.Info("admitted assignment", "policy", key, "epoch", rec.epoch)
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
	if err := c.cfg.Mesh.Update(func(s *mesh.NodeState) {
		qps := s.Load.QPS // the traffic report's
		s.Assignments, s.Load = list, c.cfg.Load(s.Capabilities, list)
		s.Load.QPS = qps
	}); err != nil {
		c.log.Warn("publishing assignments", "err", err)
	}
}

// placedHere is what admission keeps of a placement that names this
// node: a copy of each record was a tenth of the heap of a node that
// serves thousands of them.
type placedHere struct {
	version, epoch uint64
	resources      catalog.Resources
	deps           []mesh.Dep
}

func assignmentID(key string, epoch uint64) string { return fmt.Sprintf("%s@%d", key, epoch) }

package controller

import (
	"fmt"
	"slices"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// burstBack says whether a service with burst replicas should be placed
// again to bring them back: its own tiers have had room for them, within
// the SLO, for the burst's ScaleDownAfter (measured here, so a new owner
// starts the wait again), and why.
func (c *Controller) burstBack(p catalog.Policy, b *policy.Burst, rec catalog.Placement, view *round, now time.Time) (string, bool) {
	bursting := burstCount(rec.Nodes)
	if bursting == 0 {
		delete(c.roomSince, rec.Key)
		return "", false
	}
	req, err := c.cfg.Compile(p)
	if err != nil {
		return "", false
	}
	if f := c.facts(p); f.autoscale != nil {
		scaleRequest(f.autoscale, req, rec, true)
	}
	base, err := view.snapshot()
	if err != nil {
		return "", false
	}
	snap := base.Clone()
	meshview.ReleaseHeld(snap, view.nodes, rec.Key)
	dec, err := placement.Place(snap, req)
	if err != nil || len(dec.Placements) < dec.Wanted {
		delete(c.roomSince, rec.Key)
		return "", false
	}
	since, ok := c.roomSince[rec.Key]
	if !ok {
		c.roomSince[rec.Key] = now
		return "", false
	}
	if now.Sub(since) < time.Duration(b.ScaleDownAfter) {
		return "", false
	}
	delete(c.roomSince, rec.Key)
	return fmt.Sprintf("%d burst replica(s) come back: the service's tiers have had room for %s", bursting, time.Duration(b.ScaleDownAfter)), true
}

// bursting says whether a placement has replicas on burst tiers whose
// nodes are alive.
func bursting(rec catalog.Placement, byName map[string]mesh.Node) bool {
	return slices.ContainsFunc(rec.Nodes, func(pn catalog.PlacedNode) bool {
		return pn.Burst && byName[pn.Name].Status == mesh.StatusAlive
	})
}

// burstCount counts the replicas on burst tiers.
func burstCount(ns []catalog.PlacedNode) int {
	n := 0
	for _, pn := range ns {
		if pn.Burst {
			n++
		}
	}
	return n
}

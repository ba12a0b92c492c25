package controller

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// ownerSettle is how long after the set of owners changed (a controller
// failed, joined, or came back) an agent waits before it places a policy
// that the previous set gave to another agent. Membership seen from two
// agents differs for a moment after a change; both would otherwise place
// the same policy, and a training job could start twice.
const ownerSettle = 5 * time.Second

// ownerSet is one set of owners as this controller's views of the mesh
// showed it: the set now, the set before, and when it changed (see
// ownerSettle).
type ownerSet struct {
	now, prev []string
	changed   time.Time
}

// note records owners as seen in a view read at at, and reports whether
// the set changed.
func (s *ownerSet) note(owners []string, at time.Time) bool {
	sorted := slices.Sorted(slices.Values(owners))
	if slices.Equal(sorted, s.now) {
		return false
	}
	if s.now != nil {
		s.prev, s.changed = s.now, at
	}
	s.now = sorted
	return true
}

// owns says whether me owns key in the set and may act on it, judged by a
// view read at at. Within ownerSettle of a change of the set it leaves
// alone a policy that the previous set gave to another agent: that agent
// may not be gone (a busy host declared failed refutes it within
// seconds), and may not have seen the change yet. The time is the view's,
// not the clock's: a pass that took seconds on a busy host must not act
// on a view that was still settling when it was read.
func (s *ownerSet) owns(key, me string, at time.Time) bool {
	if placement.Owner(key, s.now) != me {
		return false
	}
	return at.Sub(s.changed) >= ownerSettle || placement.Owner(key, s.prev) == me
}

// noteView reads from nodes, read at at, which agents own policies: the
// owners of inference services (meshview.Owners) and of training jobs
// (jobOwners). The controller's steps call it with the nodes they read;
// writes of training job placements call it afresh (see write).
func (c *Controller) noteView(nodes []mesh.Node, at time.Time) {
	since := map[string]time.Time{}
	for _, n := range nodes {
		if n.Controller && (n.Status == mesh.StatusFailed || n.Status == mesh.StatusUnreachable) {
			since[n.Name] = cmp.Or(c.downSince[n.Name], at)
		}
	}
	c.downSince = since
	if c.serviceOwners.note(meshview.Owners(nodes), at) {
		c.ownersSeen++
	}
	if c.trainingOwners.note(c.jobOwners(nodes, at), at) {
		c.ownersSeen++
		if c.trainingOwners.prev != nil {
			c.log.Info("owners of training jobs changed", "owners", c.trainingOwners.now, "before", c.trainingOwners.prev)
		}
	}
	c.viewAt = at
}

// jobOwners returns the owners of training jobs among nodes: as
// meshview.Owners, but a controller-capable agent failed or cut off for
// less than JobGrace still owns its jobs. A busy host's probes time out
// and its peers declare it failed for seconds at a time while it goes on
// placing; its jobs placed by another agent meanwhile could run twice. A
// job placed on a failed node waits as long (see needsPlacement), so a
// dead owner's jobs are placed again no later than its nodes' jobs are.
func (c *Controller) jobOwners(nodes []mesh.Node, at time.Time) []string {
	graced := slices.Clone(nodes)
	for i, n := range graced {
		if since, ok := c.downSince[n.Name]; ok && at.Sub(since) < JobGrace {
			graced[i].Status = mesh.StatusSuspect
		}
	}
	return meshview.Owners(graced)
}

// ownerSetOf returns the set of owners that key's kind is owned by.
func (c *Controller) ownerSetOf(key string) *ownerSet {
	if strings.HasPrefix(key, policy.KindTrainingJob+"/") {
		return &c.trainingOwners
	}
	return &c.serviceOwners
}

// owns says whether this agent owns policy key and may act on it now, by
// the last view noted (see ownerSet.owns).
func (c *Controller) owns(key string) bool {
	return c.ownerSetOf(key).owns(key, c.cfg.Mesh.Name(), c.viewAt)
}

// ownerOf returns the owner of policy key by the last view noted, settled
// or not.
func (c *Controller) ownerOf(key string) string {
	return placement.Owner(key, c.ownerSetOf(key).now)
}

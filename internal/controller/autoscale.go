package controller

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// scaleSettle is how long after a change of its replica count an
// autoscaled service is left alone: the new replicas load, and the
// traffic reports (every 2 s, requests/s over 2 s) show the load spread
// over them.
const scaleSettle = 15 * time.Second

// scaleLow is a service whose load has asked for fewer replicas since
// since; want is the most it asked for meanwhile.
type scaleLow struct {
	since time.Time
	want  int
}

// replicaLoad is what one replica of a service reports of its traffic.
type replicaLoad struct {
	rps, inflight, p99 float64 // p99 in milliseconds
}

// scaleTo says how many replicas the reported load asks for, clamped to
// a's bounds, and the evidence in a line: by requests/s or in flight,
// the total over the target per replica, rounded up; by p99, one more
// while the slowest replica's is over the target, one fewer while every
// replica's is under half of it.
func scaleTo(a *policy.Autoscale, cur int, loads []replicaLoad) (int, string) {
	var rps, inflight, worst float64
	for _, l := range loads {
		rps += l.rps
		inflight += l.inflight
		worst = max(worst, l.p99)
	}
	t := a.Target
	var want int
	var why string
	switch {
	case t.RPS > 0:
		want = int(math.Ceil(rps / t.RPS))
		why = fmt.Sprintf("%.4g req/s over %d replica(s), target %.4g a replica", rps, len(loads), t.RPS)
	case t.Inflight > 0:
		want = int(math.Ceil(inflight / t.Inflight))
		why = fmt.Sprintf("%.4g requests in flight over %d replica(s), target %.4g a replica", inflight, len(loads), t.Inflight)
	default:
		target := float64(time.Duration(t.P99)) / float64(time.Millisecond)
		switch want = cur; {
		case worst > target:
			want = cur + 1
		case worst < target/2:
			want = cur - 1
		}
		why = fmt.Sprintf("slowest replica's p99 %.4gms, target %s", worst, time.Duration(t.P99))
	}
	return min(max(want, a.Min, 1), a.Max), why
}

// autoscale decides whether an autoscaled service placed and serving at
// the policy's generation needs another replica count; when it does, it
// returns the record with its Scale set to the new count and why. It
// waits while a replica is not serving (loading ones would distort the
// load) and for scaleSettle after a change; more replicas are placed at
// once, fewer only after the load asked for fewer for ScaleDownAfter
// (then as many as it asked for at most meanwhile).
func (c *Controller) autoscale(a *policy.Autoscale, rec catalog.Placement, byName map[string]mesh.Node, now time.Time) (catalog.Placement, string, bool) {
	cur := rec.Wanted
	if rec.Scale != nil {
		cur = rec.Scale.Replicas
		if now.Sub(rec.Scale.At) < scaleSettle {
			return rec, "", false
		}
	}
	loads := make([]replicaLoad, 0, len(rec.Nodes))
	for _, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if !ok || pn.Replica != mesh.ReplicaServing || (n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect) {
			return rec, "", false
		}
		loads = append(loads, loadOf(n, rec.Key))
	}
	want, why := scaleTo(a, cur, loads)
	switch {
	case want > cur && len(rec.Nodes) < cur:
		// Placed in part: more replicas would not fit either.
		delete(c.scaleLow, rec.Key)
		return rec, "", false
	case want > cur:
		delete(c.scaleLow, rec.Key)
	case want < cur:
		low, ok := c.scaleLow[rec.Key]
		if !ok {
			low = scaleLow{since: now}
		}
		low.want = max(low.want, want)
		c.scaleLow[rec.Key] = low
		if now.Sub(low.since) < time.Duration(a.ScaleDownAfter) {
			return rec, "", false
		}
		delete(c.scaleLow, rec.Key)
		want = low.want
		why += fmt.Sprintf(", for %s", time.Duration(a.ScaleDownAfter))
	default:
		delete(c.scaleLow, rec.Key)
		return rec, "", false
	}
	rec.Scale = &catalog.Scale{Replicas: want, From: cur, Reason: why, At: now.UTC()}
	return rec, fmt.Sprintf("autoscaled %d → %d: %s", cur, want, why), true
}

// loadOf is the traffic node n reports for the model it serves for policy
// key (zero while it reports none: idle).
func loadOf(n mesh.Node, key string) replicaLoad {
	model := ""
	for _, r := range n.Replicas {
		if r.Policy == key {
			model = r.Model
		}
	}
	for _, t := range n.Traffic {
		if t.Model == model && model != "" {
			return replicaLoad{rps: t.RPS, inflight: float64(t.Inflight), p99: t.P99}
		}
	}
	return replicaLoad{}
}

// scaledReplicas is the replica count to place an autoscaled service
// with: its record's, kept within the policy's bounds, or the policy's
// starting count before any.
func scaledReplicas(a *policy.Autoscale, spec int, old catalog.Placement, have bool) (int, *catalog.Scale) {
	if !have || old.Scale == nil {
		return spec, nil
	}
	s := *old.Scale
	s.Replicas = min(max(s.Replicas, a.Min), a.Max)
	return s.Replicas, &s
}

// trimKept drops kept replicas beyond wanted (a service scaled down):
// those the fresh decision also chose are kept first.
func trimKept(keep, fresh []catalog.PlacedNode, wanted int) []catalog.PlacedNode {
	if len(keep) <= wanted {
		return keep
	}
	chosen := map[string]int{}
	for i, f := range fresh {
		chosen[f.Name] = i + 1
	}
	out := make([]catalog.PlacedNode, 0, wanted)
	for _, k := range keep {
		if chosen[k.Name] > 0 && len(out) < wanted {
			out = append(out, k)
		}
	}
	for _, k := range keep {
		if chosen[k.Name] == 0 && len(out) < wanted {
			out = append(out, k)
		}
	}
	return out
}

// scaleNote says in a line what the record's Scale says, for messages.
func scaleNote(s *catalog.Scale) string {
	if s == nil || s.From == s.Replicas {
		return ""
	}
	return fmt.Sprintf("autoscaled %d → %d (%s)", s.From, s.Replicas, strings.TrimSpace(s.Reason))
}

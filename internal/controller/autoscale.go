package controller

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
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
// (then as many as it asked for at most meanwhile). For a service placed
// per client site (clients, else nil), each client site's count follows
// the load that comes from it (autoscaleSites).
func (c *Controller) autoscale(a *policy.Autoscale, rec catalog.Placement, clients []string, byName map[string]mesh.Node, now time.Time) (catalog.Placement, string, bool) {
	cur := rec.Wanted
	if rec.Scale != nil {
		cur = rec.Scale.Replicas
		if now.Sub(rec.Scale.At) < scaleSettle {
			return rec, "", false
		}
	}
	traffic := make([]mesh.ModelTraffic, 0, len(rec.Nodes))
	for _, pn := range rec.Nodes {
		n, ok := byName[pn.Name]
		if !ok || pn.Replica != mesh.ReplicaServing || (n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect) {
			return rec, "", false
		}
		traffic = append(traffic, trafficOf(n, rec.Key))
	}
	if len(clients) > 0 {
		return c.autoscaleSites(a, rec, clients, traffic, byName, now)
	}
	loads := make([]replicaLoad, len(traffic))
	for i, t := range traffic {
		loads[i] = replicaLoad{rps: t.RPS, inflight: float64(t.Inflight), p99: t.P99}
	}
	want, why := scaleTo(a, cur, loads)
	want, why, ok := c.scaleStep(a, rec.Key, cur, want, len(rec.Nodes) < cur, why, now)
	if !ok {
		return rec, "", false
	}
	rec.Scale = &catalog.Scale{Replicas: want, From: cur, Reason: why, At: now.UTC()}
	return rec, fmt.Sprintf("autoscaled %d → %d: %s", cur, want, why), true
}

// scaleStep decides one count's change, under key in c.scaleLow: from
// cur to want (the load's ask, for the reason why) at once when more,
// unless short (placed in part: more would not fit either); when fewer,
// once the load has asked for fewer for ScaleDownAfter, to the most it
// asked for meanwhile. ok is false for no change.
func (c *Controller) scaleStep(a *policy.Autoscale, key string, cur, want int, short bool, why string, now time.Time) (int, string, bool) {
	switch {
	case want > cur && short:
		delete(c.scaleLow, key)
		return cur, "", false
	case want > cur:
		delete(c.scaleLow, key)
		return want, why, true
	case want < cur:
		low, ok := c.scaleLow[key]
		if !ok {
			low = scaleLow{since: now}
		}
		low.want = max(low.want, want)
		c.scaleLow[key] = low
		if now.Sub(low.since) < time.Duration(a.ScaleDownAfter) {
			return cur, "", false
		}
		delete(c.scaleLow, key)
		return low.want, why + fmt.Sprintf(", for %s", time.Duration(a.ScaleDownAfter)), true
	default:
		delete(c.scaleLow, key)
		return cur, "", false
	}
}

// autoscaleSites scales a service placed per client site: each client
// site's count follows the requests that came from it (ModelTraffic.Sites;
// a client region takes its sites'), whichever replica answered them, so
// replicas are added near the sites the load comes from. A replica's in
// flight and p99 count for a client site by its share of the replica's
// requests.
func (c *Controller) autoscaleSites(a *policy.Autoscale, rec catalog.Placement, clients []string, traffic []mesh.ModelTraffic, byName map[string]mesh.Node, now time.Time) (catalog.Placement, string, bool) {
	regionOf := map[string]string{}
	for _, n := range byName {
		regionOf[n.Site] = n.Region
	}
	start := max(1, rec.Wanted/len(clients))
	next := make(map[string]int, len(clients))
	var notes []string
	from, to := 0, 0
	for _, cl := range clients {
		cur, ok := 0, false
		if rec.Scale != nil {
			cur, ok = rec.Scale.Sites[cl]
		}
		if !ok {
			cur = start
		}
		placed := 0
		for _, pn := range rec.Nodes {
			if pn.Client == cl {
				placed++
			}
		}
		var loads []replicaLoad
		for _, t := range traffic {
			share := 0.0
			for site, rps := range t.Sites {
				if site == cl || regionOf[site] == cl {
					share += rps
				}
			}
			if share <= 0 {
				continue
			}
			l := replicaLoad{rps: share, p99: t.P99}
			if t.RPS > 0 {
				l.inflight = float64(t.Inflight) * min(1, share/t.RPS)
			}
			loads = append(loads, l)
		}
		want, why := scaleTo(a, cur, loads)
		if len(loads) == 0 {
			why = "no requests"
		}
		want, why, changed := c.scaleStep(a, rec.Key+"\x00"+cl, cur, want, placed < cur, why, now)
		if changed {
			notes = append(notes, fmt.Sprintf("%s %d → %d: from %s, %s", cl, cur, want, cl, why))
		}
		next[cl] = want
		from += cur
		to += want
	}
	if len(notes) == 0 {
		return rec, "", false
	}
	why := strings.Join(notes, "; ")
	rec.Scale = &catalog.Scale{Replicas: to, From: from, Sites: next, Reason: why, At: now.UTC()}
	return rec, fmt.Sprintf("autoscaled %d → %d: %s", from, to, why), true
}

// trafficOf is the traffic node n reports for the model it serves for
// policy key (zero while it reports none: idle).
func trafficOf(n mesh.Node, key string) mesh.ModelTraffic {
	model := ""
	for _, r := range n.Replicas {
		if r.Policy == key {
			model = r.Model
		}
	}
	for _, t := range n.Traffic {
		if t.Model == model && model != "" {
			return t
		}
	}
	return mesh.ModelTraffic{}
}

// scaleRequest sets req's replica counts for an autoscaled service from
// its placement record's Scale, each kept within a's bounds, and returns
// the Scale the new record keeps; before any, req keeps the policy's
// starting count and it returns nil. A service placed per client site
// takes each site's count (SiteReplicas); a site the Scale lacks starts
// at the policy's count.
func scaleRequest(a *policy.Autoscale, req *placement.Request, old catalog.Placement, have bool) *catalog.Scale {
	if !have || old.Scale == nil {
		return nil
	}
	s := *old.Scale
	if !req.PerClientSite {
		s.Sites = nil
		s.Replicas = min(max(s.Replicas, a.Min), a.Max)
		req.Replicas = s.Replicas
		return &s
	}
	s.Sites, s.Replicas = make(map[string]int, len(req.Latency.Clients)), 0
	for _, cl := range req.Latency.Clients {
		n, ok := old.Scale.Sites[cl]
		if !ok {
			n = req.ReplicasFor(cl)
		}
		n = min(max(n, a.Min, 1), a.Max)
		s.Sites[cl] = n
		s.Replicas += n
	}
	req.SiteReplicas = s.Sites
	return &s
}

// trimKeptFor is trimKept per client site for a service placed so (each
// site to its count), else trimKept. Kept replicas of no client site
// (recorded before clients were) stay.
func trimKeptFor(req *placement.Request, keep, fresh []catalog.PlacedNode, wanted int) []catalog.PlacedNode {
	if !req.PerClientSite {
		return trimKept(keep, fresh, wanted)
	}
	of := func(ns []catalog.PlacedNode, cl string) []catalog.PlacedNode {
		var out []catalog.PlacedNode
		for _, n := range ns {
			if n.Client == cl {
				out = append(out, n)
			}
		}
		return out
	}
	var out []catalog.PlacedNode
	for _, cl := range req.Latency.Clients {
		out = append(out, trimKept(of(keep, cl), of(fresh, cl), req.ReplicasFor(cl))...)
	}
	for _, k := range keep {
		if !slices.Contains(req.Latency.Clients, k.Client) {
			out = append(out, k)
		}
	}
	return out
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

package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mesh/strata/placement"
)

// Change is one what-if, as ParseChange reads it.
type Change struct {
	// Text is the change as written.
	Text string
	// Op is "site-down", "node-down", "add-nodes" or "policy".
	Op string
	// Target is the site, node, node to copy (add-nodes) or policy.
	Target string
	// Count, Rack and Site shape add-nodes: Count copies of Target, in
	// Rack and Site when given (else the original's). A copy placed in
	// another site than the original's is put where that site is: its
	// coordinate, tier and region are the site's (see Apply), not the
	// original's.
	Count      int
	Rack, Site string
	// P99 and Replicas, when set, replace a policy's.
	P99      time.Duration
	Replicas int
}

// ParseChange reads one what-if:
//
//	site NAME down
//	node NAME down
//	add N nodes like NODE [in rack RACK] [in site SITE]
//	policy NAME latency.p99=10ms [replicas=3]
func ParseChange(s string) (Change, error) {
	f := strings.Fields(s)
	c := Change{Text: strings.Join(f, " ")}
	bad := func(format string, a ...any) (Change, error) {
		return Change{}, fmt.Errorf("what-if %q: %s; want 'site NAME down', 'node NAME down', 'add N nodes like NODE [in rack RACK] [in site SITE]' or 'policy NAME latency.p99=DURATION [replicas=N]'", s, fmt.Sprintf(format, a...))
	}
	switch {
	case len(f) == 3 && (f[0] == "site" || f[0] == "node") && f[2] == "down":
		c.Op, c.Target = f[0]+"-down", f[1]
	case len(f) >= 5 && f[0] == "add" && (f[2] == "nodes" || f[2] == "node") && f[3] == "like":
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > 10000 {
			return bad("%q is not a count from 1 to 10000", f[1])
		}
		c.Op, c.Count, c.Target = "add-nodes", n, f[4]
		rest := f[5:]
		for len(rest) > 0 {
			if len(rest) < 3 || rest[0] != "in" || (rest[1] != "rack" && rest[1] != "site") {
				return bad("%q: expected 'in rack RACK' or 'in site SITE'", strings.Join(rest, " "))
			}
			if rest[1] == "rack" {
				c.Rack = rest[2]
			} else {
				c.Site = rest[2]
			}
			rest = rest[3:]
		}
	case len(f) >= 3 && f[0] == "policy":
		c.Op, c.Target = "policy", f[1]
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			switch {
			case !ok:
				return bad("%q is not FIELD=VALUE", kv)
			case k == "latency.p99":
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return bad("latency.p99 %q is not a positive duration", v)
				}
				c.P99 = d
			case k == "replicas":
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return bad("replicas %q is not a count of at least 1", v)
				}
				c.Replicas = n
			default:
				return bad("field %q: only latency.p99 and replicas can change", k)
			}
		}
	default:
		return bad("not understood")
	}
	return c, nil
}

// PolicyRequest is one applied policy as the engine places it.
type PolicyRequest struct {
	Key     string
	Request *placement.Request
	// Snapshot is the mesh as this policy's placement sees it (its own
	// reservations freed).
	Snapshot *placement.Snapshot
	// Placed lists the nodes the policy is placed on now; nil when it is
	// not placed (then the plan now stands for it). A placed policy stays
	// where it is unless a change takes one of its nodes down or changes
	// the policy, as the controller keeps it.
	Placed []string
}

// Outcome is what a what-if does to one policy.
type Outcome struct {
	Policy string `json:"policy"`
	// Status is "moves", "becomes infeasible", "becomes feasible",
	// "stays infeasible" or "unchanged".
	Status string `json:"status"`
	// Before and After are the nodes the policy is planned on now and
	// with the changes.
	Before []string `json:"before"`
	After  []string `json:"after"`
	// Why says why it is infeasible, or which nodes it leaves.
	Why string `json:"why,omitempty"`
}

// WhatIfReport is the answer to a what-if over the live mesh.
type WhatIfReport struct {
	Changes []string `json:"changes"`
	// Policies is the number of policies planned.
	Policies int `json:"policies"`
	// Outcomes lists every policy the changes affect, then the unchanged
	// ones, each sorted by key.
	Outcomes []Outcome `json:"outcomes"`
	// Elapsed is the time the what-if took.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// ErrUnknown wraps a what-if that names a site, node or policy the mesh
// does not have.
var ErrUnknown = errors.New("not in the mesh")

// WhatIf plans every policy with the changes and compares the plan with
// where it is placed now (or, when it is not placed, with its plan now),
// and says which placements would move and which policies would become
// infeasible, and why. Each policy is planned on its own snapshot,
// as the controller places it; mesh is the mesh the changes must name.
func WhatIf(mesh *placement.Snapshot, pols []PolicyRequest, changes []Change) (*WhatIfReport, error) {
	start := time.Now()
	rep := &WhatIfReport{Policies: len(pols), Outcomes: []Outcome{}}
	if err := checkChanges(mesh, pols, changes); err != nil {
		return nil, err
	}
	for _, c := range changes {
		rep.Changes = append(rep.Changes, c.Text)
	}
	for _, p := range pols {
		req := *p.Request
		touched := false
		for _, c := range changes {
			switch {
			case c.Op == "policy" && policyMatches(p.Key, c.Target):
				touched = true
				if c.P99 > 0 {
					req.Latency.P99 = c.P99
				}
				if c.Replicas > 0 {
					req.Replicas = c.Replicas
				}
			case c.Op == "site-down" || c.Op == "node-down":
				for _, name := range p.Placed {
					if n, ok := p.Snapshot.Node(name); ok && ((c.Op == "site-down" && n.Site == c.Target) || (c.Op == "node-down" && (n.Name == c.Target || n.ID == c.Target))) {
						touched = true
					}
				}
			}
		}
		if p.Placed != nil && !touched {
			rep.Outcomes = append(rep.Outcomes, Outcome{Policy: p.Key, Status: "unchanged", Before: p.Placed, After: p.Placed})
			continue
		}
		snap, err := Apply(p.Snapshot, changes)
		if err != nil {
			return nil, err
		}
		after, err := placement.Place(snap, &req)
		if err != nil {
			return nil, fmt.Errorf("%s with the changes: %w", p.Key, err)
		}
		if p.Placed != nil {
			rep.Outcomes = append(rep.Outcomes, outcome(p.Key, p.Placed, true, after))
			continue
		}
		before, err := placement.Place(p.Snapshot, p.Request)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Key, err)
		}
		rep.Outcomes = append(rep.Outcomes, outcome(p.Key, nodesOf(before), before.Feasible, after))
	}
	slices.SortStableFunc(rep.Outcomes, func(a, b Outcome) int {
		return cmp.Or(cmp.Compare(btoi(a.Status == "unchanged"), btoi(b.Status == "unchanged")), cmp.Compare(a.Policy, b.Policy))
	})
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// policyMatches accepts a policy's full key or its name.
func policyMatches(key, target string) bool {
	_, name, _ := strings.Cut(key, "/")
	return key == target || name == target
}

func checkChanges(s *placement.Snapshot, pols []PolicyRequest, changes []Change) error {
	sites := map[string]bool{}
	for _, n := range s.Nodes() {
		sites[n.Site] = true
	}
	for _, c := range changes {
		switch c.Op {
		case "site-down":
			if !sites[c.Target] {
				return fmt.Errorf("what-if %q: site %q: %w", c.Text, c.Target, ErrUnknown)
			}
		case "node-down", "add-nodes":
			if _, ok := s.Node(c.Target); !ok {
				return fmt.Errorf("what-if %q: node %q: %w", c.Text, c.Target, ErrUnknown)
			}
		case "policy":
			if !slices.ContainsFunc(pols, func(p PolicyRequest) bool { return policyMatches(p.Key, c.Target) }) {
				return fmt.Errorf("what-if %q: policy %q: %w", c.Text, c.Target, ErrUnknown)
			}
		}
	}
	return nil
}

// addedHeight is the height (access-link latency) a node added to a site
// has above the site's own coordinate: a new host in a site is close to
// its clients, not on top of them. Small next to any SLO, so that only
// the site's position decides what the new node can serve.
const addedHeight = 100 * time.Microsecond

// Apply returns s with the changes' node edits made: nodes of a site or
// a node marked down, nodes added. Policy changes leave the snapshot as
// it is (s itself is returned when no change edits a node).
//
// Client sites and regions keep the coordinates they have in s: a node
// going down or being added does not move the clients it serves (a site's
// client coordinate is otherwise the median of its nodes', which a few
// added nodes would drag). A node added "like X in site S", S not X's
// site, is placed at S's client coordinate plus addedHeight, and takes
// S's tier and region; a node added in X's own site, or in a site s does
// not know, keeps X's coordinate.
func Apply(s *placement.Snapshot, changes []Change) (*placement.Snapshot, error) {
	touched := false
	nodes := s.Nodes()
	for _, c := range changes {
		switch c.Op {
		case "site-down", "node-down":
			touched = true
			for k := range nodes {
				if (c.Op == "site-down" && nodes[k].Site == c.Target) || (c.Op == "node-down" && (nodes[k].Name == c.Target || nodes[k].ID == c.Target)) {
					nodes[k].Alive = false
				}
			}
		case "add-nodes":
			touched = true
			like, ok := s.Node(c.Target)
			if !ok {
				return nil, fmt.Errorf("what-if %q: node %q: %w", c.Text, c.Target, ErrUnknown)
			}
			coord := like.Coord
			tier, region := like.Tier, like.Region
			if c.Site != "" && c.Site != like.Site {
				if at, ok := s.Client(c.Site); ok {
					at.Height += addedHeight.Seconds()
					coord = at
				}
				if peer, ok := siteNode(nodes, c.Site); ok {
					tier, region = peer.Tier, peer.Region
				}
			}
			for k := range c.Count {
				n := like
				n.Name = fmt.Sprintf("%s-whatif-%d", like.Name, k+1)
				n.ID = n.Name
				n.Alive = true
				n.Tier, n.Region = tier, region
				n.FreeCPU, n.FreeMemory = n.CPU, n.Memory
				n.GPUs = slices.Clone(like.GPUs)
				for j := range n.GPUs {
					n.GPUs[j].Free = true
				}
				n.Artifacts, n.Datasets = nil, nil
				if c.Rack != "" {
					n.Rack = c.Rack
				}
				if c.Site != "" {
					n.Site = c.Site
				}
				if coord != nil {
					n.Coord = coord.Clone()
				}
				nodes = append(nodes, n)
			}
		}
	}
	if !touched {
		return s, nil
	}
	var b placement.Builder
	b.Add(nodes...)
	for _, name := range s.Clients() {
		at, _ := s.Client(name)
		b.SetClient(name, at)
	}
	return b.Build()
}

// siteNode returns the first node of site, with its tier and region.
func siteNode(nodes []placement.Node, site string) (placement.Node, bool) {
	for _, n := range nodes {
		if n.Site == site {
			return n, true
		}
	}
	return placement.Node{}, false
}

// outcome compares the nodes a policy is on (or planned on) now with the
// plan after the changes.
func outcome(key string, now []string, feasible bool, after *placement.Decision) Outcome {
	o := Outcome{Policy: key, Before: now, After: nodesOf(after)}
	switch {
	case feasible && !after.Feasible:
		o.Status, o.Why = "becomes infeasible", why(after)
	case !feasible && after.Feasible:
		o.Status = "becomes feasible"
	case !feasible && !after.Feasible:
		o.Status, o.Why = "stays infeasible", why(after)
		if slices.Equal(o.Before, o.After) {
			o.Status = "unchanged"
		}
	case !sameSet(o.Before, o.After):
		o.Status = "moves"
		var gone []string
		for _, n := range o.Before {
			if !slices.Contains(o.After, n) {
				gone = append(gone, n)
			}
		}
		var added []string
		for _, n := range o.After {
			if !slices.Contains(o.Before, n) {
				added = append(added, n)
			}
		}
		var parts []string
		if len(gone) > 0 {
			parts = append(parts, "leaves "+strings.Join(gone, ", "))
		}
		if len(added) > 0 {
			parts = append(parts, "goes to "+strings.Join(added, ", "))
		}
		o.Why = strings.Join(parts, "; ")
	default:
		o.Status = "unchanged"
	}
	return o
}

func nodesOf(d *placement.Decision) []string {
	out := []string{}
	for _, p := range d.Placements {
		out = append(out, p.Node)
	}
	return out
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

// why is the first reason a decision gives for falling short.
func why(d *placement.Decision) string {
	var msgs []string
	for _, f := range d.Fallbacks {
		msgs = append(msgs, f.Message)
	}
	if len(msgs) == 0 {
		first, _, _ := strings.Cut(d.String(), "\n")
		return first
	}
	return strings.Join(msgs, "; ")
}

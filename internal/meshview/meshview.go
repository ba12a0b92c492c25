// Package meshview turns what the mesh gossips into what the placement
// engine reads, for the controller that places, the API that plans and
// explains, and the simulator: the engine's snapshot of the nodes
// (Snapshot, Node), the request a policy compiles to (Compile,
// RequestFor), the client sites of other pools (RemoteClients), which
// agents own policies (Owners, FirstOwner, UnreachableControllers), a node's answer to
// a placement (AssignmentOf), and why nodes were not chosen
// (SummarizeRejections, over a decision's Rejections and Fallbacks as a
// placement record holds them). It holds no state.
package meshview

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// Owners returns the names of live controller-capable nodes: alive
// or suspect. A suspect agent is often only slow (a busy host); it keeps
// its policies until it is declared failed, so that a moment's suspicion
// does not give them a second owner. A mesh with no live
// controller-capable agent (one edge agent alone, an edge site on its own)
// is not left without owners: then every live agent may own policies, so a
// lone agent places and serves what is applied to it.
func Owners(nodes []mesh.Node) []string {
	var out, alive []string
	for _, n := range nodes {
		if n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect {
			continue
		}
		alive = append(alive, n.Name)
		if n.Controller {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 {
		return alive
	}
	return out
}

// FirstOwner returns the agent that owns policy key while every agent in
// nodes is live: rendezvous over the controller-capable nodes that have
// not left, whatever their status, or over every node that has not left
// when none is controller-capable; "" when nodes has none. Of two owners'
// placements of one epoch, the first owner's wins everywhere
// (catalog.Authorizer.Prefer).
func FirstOwner(key string, nodes []mesh.Node) string {
	var ctl, all []string
	for _, n := range nodes {
		if n.Status == mesh.StatusLeft {
			continue
		}
		all = append(all, n.Name)
		if n.Controller {
			ctl = append(ctl, n.Name)
		}
	}
	if len(ctl) == 0 {
		return placement.Owner(key, all)
	}
	return placement.Owner(key, ctl)
}

// UnreachableControllers returns the controller-capable nodes this agent
// knows (that have not left) when none of them is alive, and nil when one
// is, or none is known. Then the live agents that own policies in their
// stead (see Owners) are cut off from them, or they are all down:
// a training job those owners placed might be placed by a controller on
// the other side of a cut as well, and run twice.
func UnreachableControllers(nodes []mesh.Node) []string {
	var out []string
	for _, n := range nodes {
		switch {
		case !n.Controller || n.Status == mesh.StatusLeft:
		case n.Status == mesh.StatusAlive || n.Status == mesh.StatusSuspect:
			return nil
		default:
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// AssignmentOf returns node n's answer to the placement of policy key.
func AssignmentOf(n mesh.Node, key string) (mesh.Assignment, bool) {
	return n.Assignment(key)
}

// SummarizeRejections says in a line why nodes were not chosen: each
// reason with its count, most common first, then the last fallback. It
// reads a placement record's Rejected and Fallbacks (a decision's through
// Rejections and Fallbacks).
func SummarizeRejections(rejected map[catalog.Reason]int, fallbacks []catalog.Fallback) string {
	type kv struct {
		r catalog.Reason
		n int
	}
	var rs []kv
	for r, n := range rejected {
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
	if len(fallbacks) > 0 {
		parts = append(parts, fallbacks[len(fallbacks)-1].Message)
	}
	return strings.Join(parts, "; ")
}

// Rejections is a decision's count of nodes filtered out per reason, as
// a placement record holds it (nil for nil).
func Rejections(rejected map[placement.Reason]int) map[catalog.Reason]int {
	if rejected == nil {
		return nil
	}
	out := make(map[catalog.Reason]int, len(rejected))
	for r, n := range rejected {
		out[catalog.Reason(r)] = n
	}
	return out
}

// Fallbacks is a decision's fallbacks as a placement record holds them
// (nil for nil).
func Fallbacks(fbs []placement.Fallback) []catalog.Fallback {
	if fbs == nil {
		return nil
	}
	out := make([]catalog.Fallback, len(fbs))
	for i, f := range fbs {
		out[i] = catalog.Fallback{Client: f.Client, Tier: f.Tier, Reason: catalog.Reason(f.Reason), Message: f.Message}
	}
	return out
}

// Snapshot builds the engine's view of the mesh for placing policy key
// (none when ""), with the client sites of other pools given (see
// RemoteClients). Resources key already holds on a node count as free for
// it, so re-placing keeps what still fits.
func Snapshot(nodes []mesh.Node, key string, remote ...placement.RemoteClient) (*placement.Snapshot, error) {
	var b placement.Builder
	for _, n := range nodes {
		b.Add(Node(n))
	}
	for _, rc := range remote {
		b.AddRemoteClient(rc)
	}
	s, err := b.Build()
	if err != nil || key == "" {
		return s, err
	}
	s = s.Clone()
	ReleaseHeld(s, nodes, key)
	return s, nil
}

// Node is n as the placement engine sees it: free what no admitted assignment
// holds.
func Node(n mesh.Node) placement.Node {
	pn := placement.Node{
		ID: n.ID, Name: n.Name, Tier: n.Tier, Site: n.Site, Region: n.Region,
		Rack: n.Labels["rack"], Labels: n.Labels, Arch: n.Capabilities.CPU.Arch,
		CPU: n.Capabilities.CPU.Millicores, FreeCPU: n.Load.FreeCPU,
		Memory: n.Capabilities.Memory.Total, FreeMemory: n.Load.FreeMemory,
		Fabric: n.Capabilities.Fabric, Alive: n.Status == mesh.StatusAlive, Coord: n.Coord,
		Artifacts: n.Locality.Artifacts, Datasets: n.Locality.Datasets,
	}
	held := heldGPUs(n, "")
	for _, g := range n.Capabilities.GPUs {
		pn.GPUs = append(pn.GPUs, placement.GPU{Model: g.Model, Memory: g.Memory, Healthy: g.Healthy, Free: !held[g.Index]})
	}
	return pn
}

// heldGPUs is the device indexes of n's GPUs held by admitted assignments
// of policies other than except.
func heldGPUs(n mesh.Node, except string) map[int]bool {
	held := map[int]bool{}
	for _, as := range n.Assignments {
		if as.Accepted && as.Key != except {
			for _, g := range as.GPUs {
				held[g] = true
			}
		}
	}
	return held
}

// ReleaseHeld gives back on clone s what policy key's admitted assignments
// hold: their CPU and memory, and their GPUs no other assignment holds.
func ReleaseHeld(s *placement.Snapshot, nodes []mesh.Node, key string) {
	for _, n := range nodes {
		as, ok := AssignmentOf(n, key)
		if !ok || !as.Accepted {
			continue
		}
		others := heldGPUs(n, key)
		var pos []int
		for j, g := range n.Capabilities.GPUs {
			if slices.Contains(as.GPUs, g.Index) && !others[g.Index] {
				pos = append(pos, j)
			}
		}
		_ = s.Release(n.ID, as.CPU, as.Memory, pos) // n is in s: it was built from nodes
	}
}

// RemoteClients turns the other sites of a federated mesh, as seen from
// site here, into the placement engine's client sites: each is its RTT
// from here (mesh.Site.RTTMillis: measured by the sites' gateways, or
// estimated from their WAN coordinates) further than here. An
// unreachable site is an unreachable client, with no distance; a site
// without an RTT yet stays an unknown client.
func RemoteClients(here string, sites []mesh.Site) []placement.RemoteClient {
	var out []placement.RemoteClient
	for _, s := range sites {
		if s.Name == here {
			continue
		}
		if s.Status == mesh.SiteUnreachable {
			out = append(out, placement.RemoteClient{Name: s.Name, Via: here, Unreachable: true})
			continue
		}
		if s.RTTMillis == nil || *s.RTTMillis < 0 {
			continue
		}
		out = append(out, placement.RemoteClient{Name: s.Name, Via: here, RTT: time.Duration(*s.RTTMillis * float64(time.Millisecond))})
	}
	slices.SortFunc(out, func(a, b placement.RemoteClient) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Compile turns an applied policy into a placement request.
func Compile(p catalog.Policy) (*placement.Request, error) {
	doc, err := p.Document()
	if err != nil {
		return nil, err
	}
	return RequestFor(doc), nil
}

// RequestFor turns a policy document into a placement request. The seed is
// a hash of the policy's key, so the same policy on the same mesh places the
// same way on every agent.
func RequestFor(doc *policy.Document) *placement.Request {
	h := fnv.New64a()
	h.Write([]byte(doc.Key()))
	req := &placement.Request{Key: doc.Key(), Seed: h.Sum64()}
	cons := func(xs []*policy.Expr) {
		for _, x := range xs {
			req.Constraints = append(req.Constraints, x)
		}
	}
	affs := func(as []policy.Affinity) {
		for _, a := range as {
			req.Affinities = append(req.Affinities, placement.Affinity{Expr: a.Expr, Weight: a.Weight})
		}
	}
	res := func(r policy.Resources) placement.Resources {
		out := placement.Resources{CPU: int64(r.CPU), Memory: int64(r.Memory)}
		if r.GPUs != nil {
			out.GPUs, out.GPUModel, out.GPUMemory = r.GPUs.Count, r.GPUs.Model, int64(r.GPUs.Memory)
		}
		return out
	}
	switch {
	case doc.InferenceService != nil:
		s := doc.InferenceService
		req.Kind = placement.Inference
		req.Replicas = s.Replicas
		req.PerClientSite = s.PerClientSite
		req.Resources = res(s.Resources)
		if s.Latency != nil {
			req.Latency = placement.Latency{P99: time.Duration(s.Latency.P99), Clients: s.Latency.Clients}
		}
		req.Tiers = s.Tiers
		req.Spread = placement.Spread(s.Spread)
		if s.Model.Digest != "" {
			req.Data = append(req.Data, placement.DataRef{Digest: s.Model.Digest})
		}
		cons(s.Constraints)
		affs(s.Affinities)
	case doc.TrainingJob != nil:
		s := doc.TrainingJob
		req.Kind = placement.Training
		req.Resources = res(s.Resources)
		req.Resources.GPUs = s.Gang.GPUsPerNode
		req.Gang = placement.Gang{Nodes: s.Gang.Nodes, GPUsPerNode: s.Gang.GPUsPerNode, SameFabric: s.Gang.Fabric == "same" && s.Gang.Nodes > 1}
		req.Tiers = s.Tiers
		for _, d := range s.Data {
			req.Data = append(req.Data, placement.DataRef{Digest: d.Artifact, Dataset: d.Dataset, Bytes: int64(d.Size)})
		}
		cons(s.Constraints)
		affs(s.Affinities)
	}
	return req
}

// isSweep says p is a TrainingJob with a sweep: its trials are placed,
// not it.
// IsSweep says whether p is a TrainingJob with a sweep: its trials are
// placed, not it.
func IsSweep(p catalog.Policy) bool {
	if p.Kind != policy.KindTrainingJob || !strings.Contains(p.Source, "sweep") {
		return false
	}
	doc, err := p.Document()
	return err == nil && doc.TrainingJob != nil && doc.TrainingJob.Sweep != nil
}

// Overflow places what dec left unplaced of req on the burst tiers of b,
// within the SLO plus b.MaxExtraLatency: per client site for a service
// placed per site, else in all. Nodes dec chose are not chosen again.
// The owner places a service with burst so, and a plan shows it.
func Overflow(snap *placement.Snapshot, req *placement.Request, dec *placement.Decision, b *policy.Burst) []placement.Placement {
	exclude := slices.Clone(req.Exclude)
	placed := map[string]int{}
	for _, pl := range dec.Placements {
		exclude = append(exclude, pl.Node)
		placed[pl.Client]++
	}
	type group struct {
		client  string
		missing int
	}
	var groups []group
	if req.PerClientSite {
		for _, cl := range req.Latency.Clients {
			if n := req.ReplicasFor(cl) - placed[cl]; n > 0 {
				groups = append(groups, group{cl, n})
			}
		}
	} else if n := dec.Wanted - len(dec.Placements); n > 0 {
		groups = []group{{"", n}}
	}
	var out []placement.Placement
	for _, g := range groups {
		r := *req
		r.Tiers, r.Replicas, r.Exclude = b.Tiers, g.missing, slices.Clone(exclude)
		r.Latency.P99 += time.Duration(b.MaxExtraLatency)
		if g.client != "" {
			r.PerClientSite, r.SiteReplicas, r.Latency.Clients = false, nil, []string{g.client}
		}
		d, err := placement.Place(snap, &r)
		if err != nil {
			continue
		}
		for _, pl := range d.Placements {
			pl.Client = g.client
			out = append(out, pl)
			exclude = append(exclude, pl.Node)
		}
	}
	return out
}

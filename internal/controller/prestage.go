package controller

import (
	"slices"

	"github.com/strata-mesh/strata/mesh"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// modelData makes the service's model data the placement wants to be near
// (the engine's data gravity), with its size: a node that holds it, such
// as a standby that prestaged it, is the better place to move a replica
// to. A model not published yet adds nothing.
func (c *Controller) modelData(req *placement.Request, ref policy.ModelRef) {
	if c.cfg.Artifacts == nil {
		return
	}
	m, err := serving.ModelManifest(c.cfg.Artifacts, ref)
	if err != nil {
		return
	}
	if i := slices.IndexFunc(req.Data, func(d placement.DataRef) bool { return d.Digest == m.Digest }); i >= 0 {
		req.Data[i].Bytes = m.Size
		return
	}
	req.Data = append(req.Data, placement.DataRef{Digest: m.Digest, Bytes: m.Size})
}

// standbys names, for each replica of rec, the node placement would move
// it to if its node failed: the best node for the replica's clients (its
// client site, when placed per site) with every node of rec excluded, on
// snap, the view rec was placed on. A replica with no such node has none.
// The standby reserves nothing: at a failure the placement is made anew,
// and holding the model makes the standby its best choice.
func standbys(snap *placement.Snapshot, req *placement.Request, rec *catalog.Placement) {
	exclude := slices.Clone(req.Exclude)
	for _, pn := range rec.Nodes {
		exclude = append(exclude, pn.Name)
	}
	for i, pn := range rec.Nodes {
		r := *req
		r.Replicas, r.PerClientSite, r.SiteReplicas, r.Exclude = 1, false, nil, exclude
		if pn.Client != "" && len(r.Latency.Clients) > 0 {
			r.Latency.Clients = []string{pn.Client}
		}
		rec.Nodes[i].Standby = ""
		if dec, err := placement.Place(snap, &r); err == nil && len(dec.Placements) > 0 {
			rec.Nodes[i].Standby = dec.Placements[0].Node
		}
	}
}

// takeStandbys returns, for each replica of old that keep lost (its node
// failed or left), its standby, when placement would put the replica
// there now (alive, with room, within the SLO): the standby holds the
// model, and serves without a transfer. The fresh decision would most
// often choose it too, but only by as much as the model's transfer time
// counts in the score, which within a fast site is nothing.
func takeStandbys(snap *placement.Snapshot, req *placement.Request, old catalog.Placement, keep []catalog.PlacedNode, nodes []mesh.Node) []catalog.PlacedNode {
	var out []catalog.PlacedNode
	taken := func(name string) bool {
		has := func(pn catalog.PlacedNode) bool { return pn.Name == name }
		return slices.ContainsFunc(keep, has) || slices.ContainsFunc(out, has)
	}
	for _, pn := range old.Nodes {
		if pn.Standby == "" || taken(pn.Name) || taken(pn.Standby) {
			continue
		}
		r := *req
		r.Replicas, r.PerClientSite, r.SiteReplicas, r.Exclude = 1, false, nil, nil
		if pn.Client != "" && len(r.Latency.Clients) > 0 {
			r.Latency.Clients = []string{pn.Client}
		}
		for _, n := range nodes {
			if n.Name != pn.Standby {
				r.Exclude = append(r.Exclude, n.Name)
			}
		}
		dec, err := placement.Place(snap, &r)
		if err != nil || len(dec.Placements) == 0 || dec.Placements[0].Node != pn.Standby {
			continue
		}
		pl := dec.Placements[0]
		out = append(out, catalog.PlacedNode{Name: pl.Node, ID: pl.NodeID, Tier: pl.Tier, Site: pl.Site, Client: pn.Client})
	}
	return out
}

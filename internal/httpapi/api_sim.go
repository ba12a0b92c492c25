package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/sim"
)

// SimRequest is the body of POST /v1/sim.
type SimRequest struct {
	// WhatIf lists the changes, in sim.ParseChange's syntax.
	WhatIf []string `json:"what_if"`
}

// handleSim answers a what-if over the live mesh: GET
// /v1/sim?what_if=CHANGE[&what_if=...] or POST /v1/sim with a SimRequest.
// Every applied policy is planned on the mesh as it is and with the
// changes; nothing is written.
func (s *Server) handleSim(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "what_if") {
		return
	}
	texts := q["what_if"]
	if r.Method == http.MethodPost {
		var body SimRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			httpjson.Error(w, http.StatusBadRequest, "", "body: %v", err)
			return
		}
		texts = append(texts, body.WhatIf...)
	}
	if len(texts) == 0 {
		httpjson.Error(w, http.StatusBadRequest, "what_if", "no what_if: give at least one change, such as 'site edge-b down'")
		return
	}
	var changes []sim.Change
	for _, t := range texts {
		c, err := sim.ParseChange(t)
		if err != nil {
			httpjson.Error(w, http.StatusBadRequest, "what_if", "%v", err)
			return
		}
		changes = append(changes, c)
	}
	recs, err := s.cfg.Catalog.Policies.Values()
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	nodes, remote := s.cfg.Mesh.Nodes(), s.remoteClients()
	var pols []sim.PolicyRequest
	for _, p := range recs {
		if !s.placeable(p) {
			continue
		}
		req, err := s.cfg.Compile(p)
		if err != nil {
			continue // its placement says why; a what-if cannot plan it either
		}
		snap, err := meshview.Snapshot(nodes, p.Key(), remote...)
		if err != nil {
			httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
			return
		}
		pr := sim.PolicyRequest{Key: p.Key(), Request: req, Snapshot: snap}
		if rec, err := s.cfg.Catalog.Placements.Value(p.Key()); err == nil && rec.Generation == p.Generation &&
			(rec.State == catalog.StatePlaced || rec.State == catalog.StatePending) && len(rec.Nodes) > 0 {
			pr.Placed = []string{}
			for _, n := range rec.Nodes {
				pr.Placed = append(pr.Placed, n.Name)
			}
		}
		pols = append(pols, pr)
	}
	mesh, err := meshview.Snapshot(nodes, "", remote...)
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	rep, err := sim.WhatIf(mesh, pols, changes)
	switch {
	case errors.Is(err, sim.ErrUnknown):
		httpjson.Error(w, http.StatusNotFound, "what_if", "%v", err)
		return
	case err != nil:
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, rep)
}

// placeable says whether the controller places p: services, and training
// jobs that are not sweeps and have not ended.
func (s *Server) placeable(p catalog.Policy) bool {
	switch {
	case p.Kind == policy.KindInferenceService:
		return true
	case p.Kind != policy.KindTrainingJob || meshview.IsSweep(p):
		return false
	}
	j, err := s.cfg.Catalog.Jobs.Value(p.Name)
	return err != nil || j.Generation != p.Generation || !j.Terminal()
}

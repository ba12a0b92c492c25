package agent

import (
	"errors"
	"hash/fnv"
	"time"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// parsePolicies parses a file of policy documents into records, one per
// document, each holding its own YAML.
func parsePolicies(file string, data []byte) ([]PolicyRecord, error) {
	docs, err := policy.Parse(file, data)
	if err != nil {
		return nil, err
	}
	var out []PolicyRecord
	for _, d := range docs {
		out = append(out, PolicyRecord{Kind: d.Kind, Name: d.Metadata.Name, Source: d.Source, File: file})
	}
	return out, nil
}

// policyErrors lists err's positioned problems.
func policyErrors(err error) []PolicyError {
	var el policy.ErrorList
	if !errors.As(err, &el) {
		return nil
	}
	out := make([]PolicyError, 0, len(el))
	for _, e := range el {
		out = append(out, PolicyError{File: e.File, Line: e.Line, Column: e.Column, Field: e.Field, Message: e.Msg})
	}
	return out
}

// requestFor turns an applied policy into a placement request.
func requestFor(p PolicyRecord) (*placement.Request, error) {
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

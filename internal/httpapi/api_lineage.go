package httpapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/storage"
)

// LineageStep is one model version of a lineage chain: what made it
// (nil Lineage: pushed, not trained in the mesh), where it is served, and
// the versions retrained from it.
type LineageStep struct {
	Model    catalog.ArtifactRef   `json:"model"`
	Created  time.Time             `json:"created"`
	Signer   string                `json:"signer"`
	Lineage  *catalog.Lineage      `json:"lineage,omitempty"`
	Served   []LineageServed       `json:"served,omitempty"`
	Children []catalog.ArtifactRef `json:"children,omitempty"`
}

// LineageServed is one node serving (or loading) a model version.
type LineageServed struct {
	Policy string `json:"policy"`
	Node   string `json:"node"`
	Site   string `json:"site"`
	State  string `json:"state"`
}

// LineageChain is a model version's lineage, newest first.
type LineageChain struct {
	Chain []LineageStep `json:"chain"`
}

// maxLineage bounds a chain walked back through parents.
const maxLineage = 1000

// handleLineage answers GET /v1/lineage/{name}[?version=V]: the version
// (default: the newest), then the version it was retrained from, back to
// one that was pushed, each with what made it, where it is served and
// what was retrained from it.
func (s *Server) handleLineage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "version") || !s.needArtifacts(w) {
		return
	}
	name, version := r.PathValue("name"), q.Get("version")
	m, err := s.cfg.Artifacts.Lookup(storage.KindModel, name, version)
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "", "no model version %s:%s", name, version)
		return
	}
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	all := s.artifactsList(storage.KindModel)
	children := map[string][]catalog.ArtifactRef{}
	for _, info := range all {
		if l, ok, _ := catalog.LineageOf(info.Metadata); ok && l.Parent != nil {
			k := l.Parent.String()
			children[k] = append(children[k], refOf(info.Manifest))
		}
	}
	served := map[string][]LineageServed{}
	for _, n := range s.cfg.Mesh.Nodes() {
		if n.Status != mesh.StatusAlive {
			continue
		}
		for _, rep := range n.Replicas {
			served[rep.Model] = append(served[rep.Model], LineageServed{Policy: rep.Policy, Node: n.Name, Site: n.Site, State: rep.State})
		}
	}
	var out LineageChain
	seen := map[string]bool{}
	for len(out.Chain) < maxLineage {
		ref := refOf(m)
		if seen[ref.String()] {
			break
		}
		seen[ref.String()] = true
		step := LineageStep{Model: ref, Created: m.Created, Signer: m.Signer, Served: served[ref.String()], Children: children[ref.String()]}
		l, ok, err := catalog.LineageOf(m.Metadata)
		if err != nil {
			s.log.Warn("a model version's lineage does not decode", "model", ref.String(), "err", err)
		}
		if ok {
			step.Lineage = &l
		}
		out.Chain = append(out.Chain, step)
		if !ok || l.Parent == nil {
			break
		}
		if m, err = s.cfg.Artifacts.Lookup(storage.KindModel, l.Parent.Name, l.Parent.Version); err != nil {
			break
		}
	}
	for i := range out.Chain {
		slices.SortFunc(out.Chain[i].Served, func(a, b LineageServed) int {
			return strings.Compare(a.Policy+"\x00"+a.Node, b.Policy+"\x00"+b.Node)
		})
	}
	httpjson.Write(w, http.StatusOK, out)
}

func refOf(m storage.Manifest) catalog.ArtifactRef {
	return catalog.ArtifactRef{Kind: string(m.Kind), Name: m.Name, Version: m.Version, Digest: m.Digest}
}

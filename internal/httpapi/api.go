package httpapi

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/internal/ui"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-mesh/strata/mesh"
)

// apiError is the body of every error response.
type apiError = httpjson.ErrorBody

// routes builds the HTTP API.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/agent/self", s.handleSelf)
	mux.HandleFunc("GET /v1/members", s.handleMembers)
	mux.HandleFunc("GET /v1/sites", s.handleSites)
	mux.HandleFunc("GET /v1/nodes", s.handleNodes)
	mux.HandleFunc("GET /v1/nodes/{id}", s.handleNode)
	mux.HandleFunc("GET /v1/rtt", s.handleRTT)
	mux.HandleFunc("POST /v1/plan", s.handlePlan)
	mux.HandleFunc("POST /v1/policies", s.handleApply)
	mux.HandleFunc("GET /v1/policies", s.handlePolicies)
	mux.HandleFunc("DELETE /v1/policies/{kind}/{name}", s.handleDeletePolicy)
	mux.HandleFunc("GET /v1/placements", s.handlePlacements)
	mux.HandleFunc("POST /v1/artifacts", s.handlePush)
	mux.HandleFunc("GET /v1/artifacts", s.handleArtifacts)
	mux.HandleFunc("POST /v1/artifacts/pull", s.handlePull)
	mux.HandleFunc("GET /v1/artifacts/blob", s.handleBlob)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{name}", s.handleModel)
	mux.HandleFunc("POST /v1/models/{name}/feedback", s.handleFeedback)
	mux.HandleFunc("GET /v1/lineage/{name}", s.handleLineage)
	mux.HandleFunc("GET /v1/transfers", s.handleTransfers)
	mux.HandleFunc("GET /v1/drift", s.handleDrift)
	mux.HandleFunc("GET /v1/jobs", s.handleJobs)
	mux.HandleFunc("GET /v1/jobs/{name}", s.handleJob)
	mux.HandleFunc("GET /v1/experiments", s.handleExperiments)
	mux.HandleFunc("GET /v1/experiments/{name}", s.handleExperiment)
	mux.HandleFunc("GET /v1/jobs/{name}/logs", s.handleJobLogs)
	mux.HandleFunc("POST /v1/pki/certificates", s.handleIssueCert)
	mux.HandleFunc("GET /v1/keyring", s.handleKeyring)
	mux.HandleFunc("POST /v1/keyring", s.handleKeyringOp)
	mux.HandleFunc("GET /v1/sim", s.handleSim)
	mux.HandleFunc("POST /v1/sim", s.handleSim)
	mux.Handle("GET /v1/events", s.cfg.Events)
	mux.HandleFunc("/v2/", s.handleV2)
	mux.HandleFunc("/v2", s.handleV2)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/ui/", ui.Handler())
	mux.Handle("GET /ui", ui.Redirect())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	return s.guard(bodyDeadline(s.authorize(methodJSON(mux))))
}

// methodJSON answers a known path with the wrong method by a JSON 405
// instead of the catch-all 404.
func methodJSON(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "/" {
			for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				if _, p := mux.Handler(withMethod(r, m)); p != "/" && p != "" {
					httpjson.Error(w, http.StatusMethodNotAllowed, "", "method %s not allowed on %s", r.Method, r.URL.Path)
					return
				}
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func withMethod(r *http.Request, method string) *http.Request {
	c := *r
	c.Method = method
	return &c
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	h := health(s.cfg.Mesh.ID(), s.cfg.Mesh.Members())
	if s.cfg.RemoteSites != nil {
		federatedHealth(&h, s.cfg.RemoteSites())
	}
	h.Node, h.ID = s.cfg.Mesh.Name(), s.cfg.Mesh.ID()
	httpjson.Write(w, http.StatusOK, h)
}

// health tells "ok" from "degraded": an agent that knows other members but
// reaches none of them is alone, and one that reaches only members of its
// own site while other sites are known is cut off. Either still serves its
// own clients, so the answer stays 200 and the status says which.
func health(self string, members []mesh.Member) api.Health {
	h := api.Health{Status: "ok"}
	var site string
	for _, m := range members {
		if m.ID == self {
			site = m.Site
		}
	}
	known, alive := 0, 0
	otherSites, reached := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		if m.Status == mesh.StatusAlive || m.Status == mesh.StatusSuspect {
			h.AliveMembers++
		}
		if m.ID == self || m.Status == mesh.StatusLeft {
			continue
		}
		known++
		if m.Site != site {
			otherSites[m.Site] = true
		}
		if m.Status == mesh.StatusAlive || m.Status == mesh.StatusSuspect {
			alive++
			reached[m.Site] = true
		}
	}
	switch {
	case known > 0 && alive == 0:
		h.Status = "degraded"
		h.Reasons = append(h.Reasons, fmt.Sprintf("alone: none of the %d other known members is reachable", known))
	case len(otherSites) > 0 && !hasOther(reached, site):
		h.Status = "degraded"
		h.Reasons = append(h.Reasons, fmt.Sprintf("site %s is cut off: no member of %s is reachable", site, strings.Join(slices.Sorted(maps.Keys(otherSites)), ", ")))
	}
	return h
}

// federatedHealth marks h degraded when federation knows other sites and
// none of them was heard from lately: this site is cut off from the rest.
func federatedHealth(h *api.Health, remotes []mesh.Site) {
	var unheard []string
	for _, r := range remotes {
		if r.Status != mesh.SiteReachable {
			unheard = append(unheard, r.Name)
		}
	}
	if len(remotes) == 0 || len(unheard) < len(remotes) {
		return
	}
	h.Status = "degraded"
	h.Reasons = append(h.Reasons, fmt.Sprintf("cut off from the federation: no summary from %s lately", strings.Join(unheard, ", ")))
}

// hasOther reports whether set has a key other than k.
func hasOther(set map[string]bool, k string) bool {
	for s := range set {
		if s != k {
			return true
		}
	}
	return false
}

func (s *Server) handleSelf(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	n, err := s.cfg.Mesh.Node(s.cfg.Mesh.ID())
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, n)
}

func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	httpjson.Write(w, http.StatusOK, s.cfg.Mesh.Members())
}

func (s *Server) handleSites(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	sites := poolSites(s.cfg.Mesh, time.Now())
	if s.cfg.RemoteSites != nil {
		sites = append(sites, s.cfg.RemoteSites()...)
	}
	httpjson.Write(w, http.StatusOK, sites)
}

// poolSites summarizes the sites whose nodes this agent sees (mesh.Sites)
// with what its membership and the nodes' Vivaldi coordinates tell of each.
// A site with an alive node was heard from at now: membership hears from
// its alive members all the time. Its RTT is this agent's estimated round
// trip to the site's nearest alive node with a coordinate (0 for this
// agent's own site: the agent is that node). A site with no alive node has
// neither, as a remote site cut off has none.
func poolSites(m Mesh, now time.Time) []mesh.Site {
	nodes := m.Nodes()
	sites := mesh.Sites(nodes)
	self := m.ID()
	alive := map[string]bool{}
	nearest := map[string]float64{}
	for _, n := range nodes {
		if n.Status != mesh.StatusAlive {
			continue
		}
		alive[n.Site] = true
		d, err := m.RTT(self, n.ID)
		if err != nil {
			continue // no coordinate yet
		}
		ms := float64(d) / float64(time.Millisecond)
		if best, ok := nearest[n.Site]; !ok || ms < best {
			nearest[n.Site] = ms
		}
	}
	for i := range sites {
		st := &sites[i]
		if !alive[st.Name] {
			continue
		}
		heard := now
		st.Heard = &heard
		if ms, ok := nearest[st.Name]; ok {
			st.RTTMillis = &ms
		}
	}
	return sites
}

// nodeFilter selects nodes by tier, site and labels (all must match).
type nodeFilter struct {
	tier, site string
	labels     map[string]string
}

func parseNodeFilter(q url.Values) (nodeFilter, *apiError) {
	f := nodeFilter{tier: q.Get("tier"), site: q.Get("site"), labels: map[string]string{}}
	if len(q["tier"]) > 1 || len(q["site"]) > 1 {
		return f, &apiError{Error: "tier and site may be given once each", Field: "tier"}
	}
	if f.tier != "" && !mesh.ValidTier(f.tier) {
		return f, &apiError{Error: fmt.Sprintf("tier %q is not a tier: use edge, onprem or cloud", f.tier), Field: "tier"}
	}
	if _, ok := q["site"]; ok && f.site == "" {
		return f, &apiError{Error: "site must not be empty", Field: "site"}
	}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return f, &apiError{Error: fmt.Sprintf("label %q must be k=v", l), Field: "label"}
		}
		f.labels[k] = v
	}
	return f, nil
}

func (f nodeFilter) match(n mesh.Node) bool {
	if f.tier != "" && n.Tier != f.tier || f.site != "" && n.Site != f.site {
		return false
	}
	for k, v := range f.labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "tier", "site", "label") {
		return
	}
	f, perr := parseNodeFilter(q)
	if perr != nil {
		httpjson.Write(w, http.StatusBadRequest, perr)
		return
	}
	out := []mesh.Node{}
	for _, n := range s.cfg.Mesh.Nodes() {
		if f.match(n) {
			out = append(out, n)
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	n, err := s.cfg.Mesh.Node(r.PathValue("id"))
	if errors.Is(err, mesh.ErrUnknownNode) {
		httpjson.Error(w, http.StatusNotFound, "", "no node named or with ID %q", r.PathValue("id"))
		return
	}
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, n)
}

// RTTResponse is the body of GET /v1/rtt.
type RTTResponse struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	RTTMs float64 `json:"rtt_ms"`
}

func (s *Server) handleRTT(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "from", "to") {
		return
	}
	from, to := q.Get("from"), q.Get("to")
	if from == "" {
		from = s.cfg.Mesh.Name()
	}
	if to == "" {
		httpjson.Error(w, http.StatusBadRequest, "to", "to is required: GET /v1/rtt?from=NODE&to=NODE (from defaults to this node)")
		return
	}
	d, err := safe.RTT(s.cfg.Mesh, from, to)
	switch {
	case errors.Is(err, safe.ErrPanicked):
		httpjson.Error(w, http.StatusServiceUnavailable, "", "the coordinates of %s and %s cannot be compared (%v)", from, to, err)
		return
	case errors.Is(err, mesh.ErrUnknownNode):
		httpjson.Error(w, http.StatusNotFound, "", "%s", strings.TrimPrefix(err.Error(), "mesh: "))
		return
	case errors.Is(err, mesh.ErrNoCoordinate):
		httpjson.Error(w, http.StatusServiceUnavailable, "", "%s (coordinates settle within seconds of joining)", strings.TrimPrefix(err.Error(), "mesh: "))
		return
	case err != nil:
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, RTTResponse{From: from, To: to, RTTMs: float64(d.Microseconds()) / 1000})
}

// handleV2 serves the Open Inference Protocol, or says why it cannot.
func (s *Server) handleV2(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Inference == nil {
		httpjson.Error(w, http.StatusServiceUnavailable, "", "inference is not available on this agent: %v", s.cfg.InferenceErr)
		return
	}
	s.cfg.Inference.ServeHTTP(w, r)
}

// PeerRoutes are the requests other agents send this one over the data
// plane: inference forwarded to a replica here, and the logs of a job that
// ran here.
func (s *Server) PeerRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", s.handleV2)
	mux.HandleFunc("GET /v1/jobs/{name}/logs", s.handleJobLogs)
	mux.HandleFunc("POST /v1/pki/certificates", s.handleIssueCert)
	// Policy writes other agents pass to this one (it is a controller).
	mux.HandleFunc("POST /v1/policies", s.authorizeForwarded(s.handleApply))
	mux.HandleFunc("DELETE /v1/policies/{kind}/{name}", s.authorizeForwarded(s.handleDeletePolicy))
	mux.HandleFunc("GET /v1/sim", s.handleSim)
	mux.HandleFunc("POST /v1/sim", s.handleSim)
	return mux
}

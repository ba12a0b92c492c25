package agent

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/strata-mesh/strata/internal/httpjson"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-mesh/strata/mesh"
)

// apiError is the body of every error response.
type apiError = httpjson.ErrorBody

// routes builds the HTTP API.
func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", a.handleHealth)
	mux.HandleFunc("GET /v1/agent/self", a.handleSelf)
	mux.HandleFunc("GET /v1/members", a.handleMembers)
	mux.HandleFunc("GET /v1/nodes", a.handleNodes)
	mux.HandleFunc("GET /v1/nodes/{id}", a.handleNode)
	mux.HandleFunc("GET /v1/rtt", a.handleRTT)
	mux.HandleFunc("POST /v1/plan", a.handlePlan)
	mux.HandleFunc("POST /v1/policies", a.handleApply)
	mux.HandleFunc("GET /v1/policies", a.handlePolicies)
	mux.HandleFunc("DELETE /v1/policies/{kind}/{name}", a.handleDeletePolicy)
	mux.HandleFunc("GET /v1/placements", a.handlePlacements)
	mux.HandleFunc("POST /v1/artifacts", a.handlePush)
	mux.HandleFunc("GET /v1/artifacts", a.handleArtifacts)
	mux.HandleFunc("POST /v1/artifacts/pull", a.handlePull)
	mux.HandleFunc("GET /v1/models", a.handleModels)
	mux.HandleFunc("GET /v1/models/{name}", a.handleModel)
	mux.HandleFunc("GET /v1/transfers", a.handleTransfers)
	mux.HandleFunc("GET /v1/drift", a.handleDrift)
	mux.HandleFunc("GET /v1/jobs", a.handleJobs)
	mux.HandleFunc("GET /v1/jobs/{name}", a.handleJob)
	mux.HandleFunc("GET /v1/jobs/{name}/logs", a.handleJobLogs)
	mux.Handle("GET /v1/events", a.events)
	mux.HandleFunc("/v2/", a.handleV2)
	mux.HandleFunc("/v2", a.handleV2)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	return methodJSON(mux)
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

func (a *Agent) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	alive := 0
	for _, m := range a.mesh.Members() {
		if m.Status == mesh.StatusAlive {
			alive++
		}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"status": "ok", "node": a.cfg.Name, "id": a.ID(), "alive_members": alive})
}

func (a *Agent) handleSelf(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	n, err := a.mesh.Node(a.ID())
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, n)
}

func (a *Agent) handleMembers(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	httpjson.Write(w, http.StatusOK, a.mesh.Members())
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

func (a *Agent) handleNodes(w http.ResponseWriter, r *http.Request) {
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
	for _, n := range a.mesh.Nodes() {
		if f.match(n) {
			out = append(out, n)
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (a *Agent) handleNode(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	n, err := a.mesh.Node(r.PathValue("id"))
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

// rttResponse is the body of GET /v1/rtt.
type rttResponse struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	RTTMs float64 `json:"rtt_ms"`
}

func (a *Agent) handleRTT(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "from", "to") {
		return
	}
	from, to := q.Get("from"), q.Get("to")
	if from == "" {
		from = a.cfg.Name
	}
	if to == "" {
		httpjson.Error(w, http.StatusBadRequest, "to", "to is required: GET /v1/rtt?from=NODE&to=NODE (from defaults to this node)")
		return
	}
	d, err := a.mesh.RTT(from, to)
	switch {
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
	httpjson.Write(w, http.StatusOK, rttResponse{From: from, To: to, RTTMs: float64(d.Microseconds()) / 1000})
}

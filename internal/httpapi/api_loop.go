package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/driftwatch"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/serving"

	"github.com/strata-mesh/strata/mesh"
)

// maxFeedbackBody bounds a ground-truth post.
const maxFeedbackBody = 8 << 20

// handleFeedback keeps ground truth for a drift capture: POST
// /v1/models/{name}/feedback with api.FeedbackRequest. 200 with what was
// kept (nothing while no capture is under way, and why); 400 for a bad
// body; 404 where no monitor watches the model on this node, naming the
// nodes of this site that serve it.
func (s *Server) handleFeedback(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	name := r.PathValue("name")
	if s.cfg.Feedback == nil {
		httpjson.Error(w, http.StatusNotFound, "", "this agent serves no models: post ground truth for %s to the node that served the requests", name)
		return
	}
	var req api.FeedbackRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxFeedbackBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "", "body: %v; want {\"inputs\": [[...], ...], \"labels\": [...]}", err)
		return
	}
	labels := make([]string, len(req.Labels))
	for i, raw := range req.Labels {
		var str string
		var num json.Number
		switch {
		case json.Unmarshal(raw, &str) == nil:
			labels[i] = str
		case json.Unmarshal(raw, &num) == nil:
			labels[i] = num.String()
		default:
			httpjson.Error(w, http.StatusBadRequest, "labels", "label %d is %s: want a class number or name", i, raw)
			return
		}
	}
	res, err := s.cfg.Feedback(name, req.Inputs, labels)
	switch {
	case errors.Is(err, driftwatch.ErrNotWatched):
		var here []string
		self := s.cfg.Mesh.Name()
		site := ""
		if n, err := s.cfg.Mesh.Node(self); err == nil {
			site = n.Site
		}
		for _, n := range s.cfg.Mesh.Nodes() {
			if n.Site == site && n.Name != self && slices.ContainsFunc(n.Models, func(m string) bool { return strings.HasPrefix(m, name+"@") }) {
				here = append(here, n.Name)
			}
		}
		where := "no node of this site serves it"
		if len(here) > 0 {
			where = "it is served here by " + strings.Join(here, ", ")
		}
		httpjson.Error(w, http.StatusNotFound, "", "no drift monitor watches %s on this node: post its ground truth to the node that served the requests (%s)", name, where)
	case errors.Is(err, driftwatch.ErrFeedback):
		httpjson.Error(w, http.StatusBadRequest, "", "%v", err)
	case err != nil:
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
	default:
		httpjson.Write(w, http.StatusOK, res)
	}
}

// handleDrift lists every node's drift monitors: GET /v1/drift[?model=M].
func (s *Server) handleDrift(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "model") {
		return
	}
	out := []catalog.Drift{}
	for _, d := range s.driftRecords() {
		if m := q.Get("model"); m == "" || d.Model == m {
			out = append(out, d)
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// handleJobs lists training jobs, newest first: GET /v1/jobs.
func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	out := s.jobs()
	if out == nil {
		out = []catalog.Job{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// handleJob shows one job: GET /v1/jobs/{name}.
func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	j, err := s.job(r.PathValue("name"))
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "name", "no training job %q (see GET /v1/jobs)", r.PathValue("name"))
		return
	} else if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, j)
}

// handleJobLogs returns a job member's output as text: GET
// /v1/jobs/{name}/logs[?rank=N]. The node that ran it answers; any other
// agent fetches it from there.
func (s *Server) handleJobLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "rank") {
		return
	}
	rank := 0
	if s := q.Get("rank"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			httpjson.Error(w, http.StatusBadRequest, "rank", "rank=%q: want a member index from 0", s)
			return
		}
		rank = n
	}
	name := r.PathValue("name")
	j, err := s.job(name)
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "name", "no training job %q (see GET /v1/jobs)", name)
		return
	} else if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	// A gang's rank ran on its own node, which keeps its log.
	node := j.Node
	switch {
	case rank < len(j.Members):
		node = j.Members[rank].Node
	case rank < len(j.Nodes):
		node = j.Nodes[rank] // recorded before its ranks were
	}
	if node != s.cfg.Mesh.Name() && r.Header.Get(serving.HeaderForwarded) == "" {
		n, err := s.cfg.Mesh.Node(node)
		if err != nil || n.Status != mesh.StatusAlive {
			httpjson.Error(w, http.StatusBadGateway, "", "rank %d of job %s ran on %s, which is not reachable now", rank, name, node)
			return
		}
		// Over the data plane, without the caller's token: that node
		// serves the log to this agent, which the mesh CA vouches for.
		resp, err := s.cfg.Forwarder.Send(r.Context(), n, http.MethodGet, r.URL.RequestURI(), http.Header{}, nil)
		if err != nil {
			httpjson.Error(w, http.StatusBadGateway, "", "fetching the log from %s: %v", node, err)
			return
		}
		serving.CopyResponse(w, resp)
		return
	}
	logs, err := s.cfg.Jobs.Logs(name, rank)
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "name", "%v", err)
		return
	} else if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, logs)
}

// handleExperiments lists the hyperparameter searches, newest first:
// GET /v1/experiments.
func (s *Server) handleExperiments(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	out, err := s.cfg.Catalog.Experiments.Values()
	s.decodeErrors(err)
	if out == nil {
		out = []catalog.Experiment{}
	}
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Started.Equal(out[k].Started) {
			return out[i].Started.After(out[k].Started)
		}
		return out[i].Name < out[k].Name
	})
	httpjson.Write(w, http.StatusOK, out)
}

// handleExperiment shows one search with its trials: GET
// /v1/experiments/{name}.
func (s *Server) handleExperiment(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	e, err := s.cfg.Catalog.Experiments.Value(r.PathValue("name"))
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "name", "no experiment %q (see GET /v1/experiments)", r.PathValue("name"))
		return
	} else if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, e)
}

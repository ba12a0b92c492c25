package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
)

// MaxPolicyBody bounds a policy upload (bytes).
const MaxPolicyBody = 1 << 20

// readPolicyBody reads a YAML (or JSON, which is YAML) body, answering 413
// when it is too large.
func readPolicyBody(w http.ResponseWriter, r *http.Request) ([]byte, string, bool) {
	if r.ContentLength > MaxPolicyBody {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, "", "policy body of %d bytes is over the %d-byte limit", r.ContentLength, MaxPolicyBody)
		return nil, "", false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPolicyBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		httpjson.Error(w, http.StatusRequestEntityTooLarge, "", "policy body over %d bytes", MaxPolicyBody)
		return nil, "", false
	case err != nil:
		httpjson.Error(w, http.StatusBadRequest, "", "reading body: %v", err)
		return nil, "", false
	case len(strings.TrimSpace(string(body))) == 0:
		httpjson.Error(w, http.StatusBadRequest, "", "empty body: send one or more YAML policy documents")
		return nil, "", false
	}
	file := r.URL.Query().Get("file")
	if file == "" {
		file = "request"
	}
	return body, file, true
}

// PolicyErrorBody is a 400 for a policy that does not parse: every error
// with its position.
type PolicyErrorBody struct {
	Error  string        `json:"error"`
	Field  string        `json:"field,omitempty"`
	Errors []PolicyError `json:"errors"`
}

func writePolicyError(w http.ResponseWriter, err error) {
	errs := policyErrors(err)
	body := PolicyErrorBody{Error: err.Error(), Errors: errs}
	if len(errs) > 0 {
		body.Field = errs[0].Field
	}
	httpjson.Write(w, http.StatusBadRequest, body)
}

// PlanResult is one policy's dry-run placement.
type PlanResult struct {
	Policy   string              `json:"policy"`
	Decision *placement.Decision `json:"decision"`
	// Explanation is the decision for people; Why explains one node when
	// asked (?why=NODE).
	Explanation string `json:"explanation"`
	Why         string `json:"why,omitempty"`
	// Warnings name what the policy refers to that is not published: it
	// would be placed, but would wait for it.
	Warnings []string `json:"warnings,omitempty"`
	// HandOff is the site an apply would hand the policy to (federated).
	HandOff *api.HandOff `json:"hand_off,omitempty"`
	// Burst are the replicas a service with burst would place on its
	// burst tiers: those Decision could not place within its own.
	Burst []placement.Placement `json:"burst,omitempty"`
}

// remoteClients are the other sites of a federated mesh as client sites
// of this one's (meshview.RemoteClients); none otherwise.
func (s *Server) remoteClients() []placement.RemoteClient {
	if s.cfg.RemoteSites == nil {
		return nil
	}
	me, err := s.cfg.Mesh.Node(s.cfg.Mesh.ID())
	if err != nil {
		return nil
	}
	return meshview.RemoteClients(me.Site, s.cfg.RemoteSites())
}

func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query(), "file", "why") {
		return
	}
	body, file, ok := readPolicyBody(w, r)
	if !ok {
		return
	}
	recs, err := parsePolicies(file, body)
	if err != nil {
		writePolicyError(w, err)
		return
	}
	why := r.URL.Query().Get("why")
	if why != "" {
		if _, err := s.cfg.Mesh.Node(why); err != nil {
			httpjson.Error(w, http.StatusNotFound, "why", "no node named %q", why)
			return
		}
	}
	nodes, remote := s.cfg.Mesh.Nodes(), s.remoteClients()
	var out []PlanResult
	for _, p := range recs {
		ev, f := s.evaluate(p, nodes, remote)
		if f != nil {
			f.write(w)
			return
		}
		if errors.Is(ev.unmeasured, placement.ErrClientUnreachable) {
			// The mesh's state, and an answer: nothing meets the SLO
			// of clients it cannot reach (the CLI exits 2).
			out = append(out, PlanResult{Policy: p.Key(), Warnings: ev.warnings,
				Explanation: fmt.Sprintf("Not placed: %v; it is placed once the site is back.\n", ev.unmeasured)})
			continue
		}
		if ev.unmeasured != nil {
			// Right after the agents start: not the request's fault.
			w.Header().Set("Retry-After", "5")
			httpjson.Error(w, http.StatusServiceUnavailable, "spec.latency.clients", "%v", ev.unmeasured)
			return
		}
		dec := ev.dec
		res := PlanResult{Policy: p.Key(), Decision: dec, Explanation: dec.String(), Warnings: ev.warnings, HandOff: ev.handOff}
		if h := ev.handOff; h != nil {
			res.Explanation = strings.TrimRight(res.Explanation, "\n") +
				fmt.Sprintf("\nNo node of this site can take it: applied, it would be handed to site %s, where %s.\n", h.Site, h.Why)
		}
		if len(ev.burst) > 0 {
			res.Burst = ev.burst
			res.Explanation = strings.TrimRight(res.Explanation, "\n") + "\n" + burstExplanation(p, dec, ev.burst)
		}
		if why != "" {
			res.Why = dec.Explain(why)
		}
		out = append(out, res)
	}
	httpjson.Write(w, http.StatusOK, out)
}

// ApplyResult says what an apply did to one policy.
type ApplyResult struct {
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// Changed is false when the same source was applied again.
	Changed bool `json:"changed"`
	// Warnings say what the policy waits for, as a plan would: a model
	// or dataset version not published, room the mesh has not got now, a
	// client site not measured yet. An apply that warns still applies.
	Warnings []string `json:"warnings,omitempty"`
}

// missing lists what p refers to that is not published (as far as this
// agent knows): the model an InferenceService serves, the datasets a
// TrainingJob reads.
func (s *Server) missing(p catalog.Policy) []string {
	doc, err := p.Document()
	if err != nil {
		return nil
	}
	var out []string
	if svc := doc.InferenceService; svc != nil {
		if _, err := serving.ModelManifest(s.cfg.Artifacts, svc.Model); errors.Is(err, mesh.ErrNotFound) {
			ref := cmp.Or(svc.Model.Digest, svc.Model.Name+":"+cmp.Or(svc.Model.Version, "latest"))
			out = append(out, fmt.Sprintf("model %s is not published (strata push it): %s waits for it", ref, p.Key()))
		}
	}
	if job := doc.TrainingJob; job != nil {
		for _, d := range job.Data {
			var err error
			ref := d.Dataset
			if d.Artifact != "" {
				ref = d.Artifact
				_, err = s.cfg.Artifacts.ByDigest(d.Artifact)
			} else if d.Dataset != "" {
				name, version, _ := strings.Cut(d.Dataset, ":")
				_, err = s.cfg.Artifacts.Lookup(storage.KindDataset, name, version)
			}
			if errors.Is(err, mesh.ErrNotFound) {
				out = append(out, fmt.Sprintf("dataset %s is not published (strata push --kind dataset): %s waits for it", ref, p.Key()))
			}
		}
	}
	return out
}

func (s *Server) handleApply(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query(), "file") {
		return
	}
	body, file, ok := readPolicyBody(w, r)
	if !ok {
		return
	}
	recs, err := parsePolicies(file, body)
	if err != nil {
		writePolicyError(w, err)
		return
	}
	// Evaluate every document before storing any, so an apply is all or
	// nothing, and refuses what a plan refuses.
	nodes, remote := s.cfg.Mesh.Nodes(), s.remoteClients()
	warnings := make([][]string, len(recs))
	for i, p := range recs {
		ev, f := s.evaluate(p, nodes, remote)
		if f != nil {
			f.write(w)
			return
		}
		if err := s.checkExec(r, p); err != nil {
			httpjson.Error(w, http.StatusForbidden, "spec.launcher", "%v", err)
			return
		}
		warnings[i] = ev.warnings
	}
	if s.forwardWrite(w, r, body) {
		return
	}
	var out []ApplyResult
	for i, p := range recs {
		// A policy applied anew after a delete does not start again at
		// generation 1: the deleted one's jobs and trials would read as
		// its own.
		res := ApplyResult{Policy: p.Key(), Changed: true, Generation: s.cfg.Catalog.NextGeneration(p.Key()), Warnings: warnings[i]}
		if old, err := s.cfg.Catalog.Policies.Value(p.Key()); err == nil && old.Source == p.Source {
			res.Generation, res.Changed = old.Generation, false
		}
		if res.Changed {
			p.Generation, p.Applied, p.AppliedAt = res.Generation, time.Now().UTC(), s.cfg.Mesh.Name()
			p.AppliedVia = passedBy(r)
			if tok := requestToken(r); tok != nil {
				p.AppliedBy = tok.Name
			}
			if me, err := s.cfg.Mesh.Node(s.cfg.Mesh.ID()); err == nil {
				p.Site = me.Site
				if p.AppliedVia != "" {
					// The site the apply was made in is the site of the
					// agent that passed it here.
					if via, err := s.cfg.Mesh.Node(p.AppliedVia); err == nil {
						p.Site = via.Site
					}
				}
			}
			if _, err := s.cfg.Catalog.Policies.Put(p); err != nil {
				code := http.StatusInternalServerError
				if errors.Is(err, mesh.ErrForbidden) {
					code = http.StatusForbidden
				}
				httpjson.Error(w, code, "", "storing %s: %v", p.Key(), err)
				return
			}
		}
		out = append(out, res)
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	out := s.policies()
	if out == nil {
		out = []catalog.Policy{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (s *Server) handleDeletePolicy(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	key := r.PathValue("kind") + "/" + r.PathValue("name")
	if _, err := s.cfg.Catalog.Policies.Get(key); errors.Is(err, catalog.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "", "no policy %s", key)
		return
	}
	if s.forwardWrite(w, r, nil) {
		return
	}
	if err := s.cfg.Catalog.Policies.Delete(key); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, mesh.ErrForbidden) {
			code = http.StatusForbidden
		}
		httpjson.Error(w, code, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"deleted": key})
}

// PlacementStatus is one policy's placement as GET /v1/placements shows it.
type PlacementStatus struct {
	Policy     string `json:"policy"`
	Generation uint64 `json:"generation"`
	// PlacedGeneration is the policy generation the placement is of
	// (Placement.Generation, which Generation hides in JSON): less than
	// Generation while a change is being placed, 0 before any placement.
	PlacedGeneration uint64 `json:"placed_generation,omitempty"`
	catalog.Placement
	// Rollout is the service's latest retrain and rollout, if any.
	Rollout *catalog.Rollout `json:"rollout,omitempty"`
}

func (s *Server) handlePlacements(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	recs := s.placements()
	nodes := s.cfg.Mesh.Nodes()
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out := []PlacementStatus{}
	for _, p := range s.policies() {
		st := PlacementStatus{Policy: p.Key(), Generation: p.Generation}
		if rec, ok := recs[p.Key()]; ok {
			for i, pn := range rec.Nodes {
				as, ok := meshview.AssignmentOf(byName[pn.Name], rec.Key)
				rec.Nodes[i].Admitted = ok && as.Accepted && as.Epoch == rec.Epoch
			}
			if p.Kind == policy.KindInferenceService {
				replicaStates(&rec, byName)
			}
			st.Placement, st.PlacedGeneration = rec, rec.Generation
		} else if meshview.IsSweep(p) {
			// A sweep is never placed itself (its trials are): its
			// experiment says where it stands.
			st.Placement = sweepPlacement(p, s.cfg.Catalog, nodes)
		} else {
			st.Placement = catalog.Placement{Key: p.Key(), Kind: p.Kind, Name: p.Name, State: catalog.StatePending, Message: unplaced(p.Kind, nodes)}
		}
		if r, ok := s.cfg.Catalog.ActiveRollout(p); ok {
			st.Rollout = &r
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	httpjson.Write(w, http.StatusOK, out)
}

// PolicyError is one problem in a policy document, with its position.
type PolicyError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e PolicyError) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Message)
}

// replicaStates fills in what each node of a service's placement reports of
// its model, and says the truth in the placement's state: "placed" only
// when every replica serves; "loading" while some load; "failed" with the
// reason when one failed to load.
func replicaStates(rec *catalog.Placement, byName map[string]mesh.Node) {
	serving, loading := 0, 0
	var failed, waiting []string
	for i, pn := range rec.Nodes {
		// The node's last report of it: looked up, not scanned (a serving
		// node reports thousands, and every placement asks).
		n := byName[pn.Name]
		if r, ok := n.Replica(rec.Key); ok {
			rec.Nodes[i].Replica, rec.Nodes[i].Reason = r.State, r.Reason
			if pn.Standby != "" && r.Model != "" {
				rec.Nodes[i].StandbyWarm = slices.Contains(byName[pn.Standby].Standbys, r.Model)
			}
		}
		switch rec.Nodes[i].Replica {
		case mesh.ReplicaServing:
			serving++
		case mesh.ReplicaFailed:
			failed = append(failed, fmt.Sprintf("%s: %s", pn.Name, rec.Nodes[i].Reason))
		default:
			loading++
			if r := rec.Nodes[i].Reason; r != "" && !slices.Contains(waiting, r) {
				waiting = append(waiting, r)
			}
		}
	}
	if rec.State != catalog.StatePlaced || len(rec.Nodes) == 0 {
		return
	}
	switch {
	case len(failed) > 0:
		rec.State = catalog.StateFailed
		rec.Message = fmt.Sprintf("%d of %d replicas failed to load (%s); %d serving", len(failed), len(rec.Nodes), strings.Join(failed, "; "), serving)
	case loading > 0 && len(waiting) > 0 && serving == 0:
		// Nothing to load yet: the model is not published (or has not
		// replicated here).
		rec.State = catalog.StatePending
		rec.Message = strings.Join(waiting, "; ")
	case loading > 0:
		rec.State = catalog.StateLoading
		rec.Message = fmt.Sprintf("admitted; loading the model: %d of %d replicas serving", serving, len(rec.Nodes))
	case len(rec.Nodes) < rec.Wanted:
		// Placed in part: what it serves, and why no more (the owner's
		// "placed 1 of 2: ..." message).
		rec.Message = "serving; " + rec.Message
	default:
		rec.Message = "serving on every node"
	}
}

// unplaced says why a policy of kind has no placement yet, as this agent
// sees the mesh: a training job waits while no controller-capable agent
// is reachable (see meshview.UnreachableControllers).
// sweepPlacement is what GET /v1/placements says of a sweep: its
// experiment's state (running, training, succeeded, failed) and a line
// on its trials, or pending until its owner starts the experiment of
// this generation.
func sweepPlacement(p catalog.Policy, cat *catalog.Catalog, nodes []mesh.Node) catalog.Placement {
	rec := catalog.Placement{Key: p.Key(), Kind: p.Kind, Name: p.Name, Generation: p.Generation, State: catalog.StatePending}
	e, err := cat.Experiments.Value(p.Name)
	if err != nil || e.Generation != p.Generation || e.Key != p.Key() {
		rec.Message = unplaced(p.Kind, nodes)
		return rec
	}
	rec.State, rec.Updated = e.State, e.Started
	if !e.Finished.IsZero() {
		rec.Updated = e.Finished
	}
	rec.Message = trialSummary(e)
	if e.Message != "" {
		rec.Message += "; " + e.Message
	}
	return rec
}

// trialSummary counts an experiment's trials by state, in a line.
func trialSummary(e catalog.Experiment) string {
	n := map[string]int{}
	for _, tr := range e.Trials {
		n[tr.State]++
	}
	out := fmt.Sprintf("experiment: %d trials", len(e.Trials))
	for _, st := range []string{catalog.JobPending, catalog.JobRunning, catalog.JobSucceeded, catalog.JobFailed, catalog.TrialStopped} {
		if n[st] > 0 {
			out += fmt.Sprintf(", %d %s", n[st], st)
		}
	}
	return out
}

func unplaced(kind string, nodes []mesh.Node) string {
	if away := meshview.UnreachableControllers(nodes); kind == policy.KindTrainingJob && len(away) > 0 {
		return fmt.Sprintf("waiting for a controller-capable agent (%s: none reachable); only they place training jobs, so that no job is placed on both sides of a cut", strings.Join(away, ", "))
	}
	return "waiting for its owner to place it"
}

// burstExplanation says where a service's overflow would go, for people.
func burstExplanation(p catalog.Policy, dec *placement.Decision, burst []placement.Placement) string {
	var b strings.Builder
	extra := ""
	if doc, err := p.Document(); err == nil && doc.InferenceService != nil && doc.InferenceService.Burst != nil {
		bu := doc.InferenceService.Burst
		extra = fmt.Sprintf(" (%s, within the SLO + %s)", strings.Join(bu.Tiers, ", "), time.Duration(bu.MaxExtraLatency))
	}
	fmt.Fprintf(&b, "Burst: the service's tiers hold %d of %d replicas within the SLO; %d overflow to the burst tiers%s:\n", len(dec.Placements), dec.Wanted, len(burst), extra)
	for _, pl := range burst {
		fmt.Fprintf(&b, "  %s (%s, %s)", pl.Node, pl.Tier, pl.Site)
		if pl.Client != "" {
			fmt.Fprintf(&b, " for %s", pl.Client)
		}
		b.WriteString("\n")
	}
	return b.String()
}

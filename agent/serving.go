package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/driftwatch"
	"github.com/strata-mesh/strata/internal/httpjson"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// headerForwarded marks a request one agent forwarded to another, so the
// second answers it or says no, and never forwards it again.
const headerForwarded = "Strata-Forwarded-By"

// openInference starts the ONNX Runtime server; without the library it
// returns nil and the reason, which /v2 then answers with.
func (a *Agent) openInference() (*infer.Server, error) {
	lib := a.cfg.ORTLibrary
	if lib == "" {
		lib = os.Getenv("STRATA_ORT_LIB")
	}
	return infer.New(infer.Config{
		NodeName:       a.cfg.Name,
		LibraryPath:    lib,
		SampleFraction: a.cfg.SampleFraction,
		Observer:       func(model string, rows []infer.Sample) { a.drift.Observe(model, rows) }, // a.drift is set before Run
		Forwarder:      forwarder{a},
		Registerer:     a.reg,
		Logger:         a.log,
	})
}

// handleV2 serves the Open Inference Protocol, or says why it cannot.
func (a *Agent) handleV2(w http.ResponseWriter, r *http.Request) {
	if a.inf == nil {
		httpjson.Error(w, http.StatusServiceUnavailable, "", "inference is not available on this agent: %v", a.infErr)
		return
	}
	a.inf.Handler().ServeHTTP(w, r)
}

// forwarder sends a request for a model this agent does not serve to the
// nearest agent (by estimated RTT) that does.
type forwarder struct{ a *Agent }

func (f forwarder) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	if by := r.Header.Get(headerForwarded); by != "" {
		return fmt.Errorf("%w: %s (forwarded here by %s)", infer.ErrModelNotFound, model, by)
	}
	targets := f.a.servingNodes(model, version)
	if len(targets) == 0 {
		return fmt.Errorf("%w: %s is served nowhere in the mesh", infer.ErrModelNotFound, model)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxForwardBody+1))
	if err != nil {
		return err
	}
	if len(body) > maxForwardBody {
		return fmt.Errorf("request over %d bytes", maxForwardBody)
	}
	// The mesh's view of who serves what lags by a gossip round: a node
	// that just stopped serving answers 404, and the next nearest is tried.
	var lastErr error
	for _, n := range targets[:min(len(targets), 3)] {
		resp, err := f.a.sendToPeer(r.Context(), n, r.Method, r.URL.RequestURI(), r.Header, body)
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode == http.StatusNotFound {
			resp.Body.Close()
			lastErr = fmt.Errorf("%w: %s no longer serves %s", infer.ErrModelNotFound, n.Name, model)
			continue
		}
		w.Header().Del(infer.HeaderServedBy) // the serving agent names itself
		copyResponse(w, resp)
		return nil
	}
	return lastErr
}

// peerRoutes are the requests other agents send this one over the data
// plane: inference forwarded to a replica here, and the logs of a job that
// ran here.
func (a *Agent) peerRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", a.handleV2)
	mux.HandleFunc("GET /v1/jobs/{name}/logs", a.handleJobLogs)
	return mux
}

// sendToPeer sends a request to agent n, marked as forwarded by this one:
// over the data plane (QUIC, mutual TLS) when both have one, else to n's
// HTTP API. The caller closes the response body.
func (a *Agent) sendToPeer(ctx context.Context, n mesh.Node, method, uri string, header http.Header, body []byte) (*http.Response, error) {
	viaData := a.art.Enabled() && n.Addrs.Data != ""
	host := n.Addrs.API
	if viaData {
		host = n.Addrs.Data
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+host+uri, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	req.Header.Set(headerForwarded, a.cfg.Name)
	if !viaData {
		return forwardClient.Do(req)
	}
	ctx, cancel := context.WithTimeout(ctx, forwardClient.Timeout)
	resp, err := a.art.Node().RoundTrip(ctx, n.Addrs.Data, req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends a request's context when its response body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// copyResponse writes resp (headers, status, body) to w and closes it.
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// maxForwardBody bounds a forwarded request, as infer bounds a local one.
const maxForwardBody = 64 << 20

// forwardClient sends to peers' HTTP APIs when the mesh has no data plane;
// its timeout bounds a request over the data plane too.
var forwardClient = &http.Client{Timeout: 30 * time.Second}

// servingNodes lists the live nodes that serve model, nearest first.
func (a *Agent) servingNodes(model, version string) []mesh.Node {
	type cand struct {
		n   mesh.Node
		rtt time.Duration
	}
	var cs []cand
	for _, n := range a.mesh.Nodes() {
		if n.Status != mesh.StatusAlive || n.ID == a.ID() || n.Addrs.API == "" {
			continue
		}
		if !slices.ContainsFunc(n.Models, func(m string) bool {
			name, ver, _ := strings.Cut(m, "@")
			return name == model && (version == "" || ver == version)
		}) {
			continue
		}
		rtt, err := a.mesh.RTT(a.cfg.Name, n.Name)
		if err != nil {
			rtt = time.Hour
		}
		cs = append(cs, cand{n, rtt})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].rtt < cs[j].rtt })
	out := make([]mesh.Node, len(cs))
	for i, c := range cs {
		out[i] = c.n
	}
	return out
}

// servedModel is a model loaded here for a policy.
type servedModel struct {
	name, version, digest string
}

// driftModels is what the drift watch needs of the models loaded here.
func driftModels(loaded map[string]servedModel) map[string]driftwatch.Model {
	out := make(map[string]driftwatch.Model, len(loaded))
	for key, sm := range loaded {
		out[key] = driftwatch.Model{Name: sm.name, Version: sm.version}
	}
	return out
}

// serving keeps the models loaded here in line with the inference
// assignments this node admitted: it pulls the bytes from the nearest
// holders, loads them (a new version swaps in beside the old) and unloads
// what is no longer assigned.
type serving struct {
	a       *Agent
	mu      sync.Mutex
	loaded  map[string]servedModel // policy key → model
	loading map[string]bool
}

func (s *serving) run(ctx context.Context) {
	for {
		changed := s.a.mesh.Changed()
		s.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(5 * time.Second):
		}
	}
}

// wanted resolves the models of the inference policies admitted here.
func (s *serving) wanted() map[string]storage.Manifest {
	a := s.a
	out := map[string]storage.Manifest{}
	for _, as := range a.mesh.Local().Assignments {
		if !as.Accepted || !strings.HasPrefix(as.Key, policy.KindInferenceService+"/") {
			continue
		}
		rec, err := a.cat.Policies.Value(as.Key)
		if err != nil {
			continue // not replicated here yet, or deleted
		}
		doc, err := rec.Document()
		if err != nil || doc.InferenceService == nil {
			continue
		}
		m, err := a.modelManifest(a.modelFor(rec, doc.InferenceService, a.cfg.Name))
		if err != nil {
			a.log.Debug("model not resolvable yet", "policy", as.Key, "err", err)
			continue
		}
		out[as.Key] = m
	}
	return out
}

// modelManifest finds the manifest a policy's model reference names.
func (a *Agent) modelManifest(ref policy.ModelRef) (storage.Manifest, error) {
	if ref.Digest != "" {
		return a.art.ByDigest(ref.Digest, storage.KindModel)
	}
	return a.art.Lookup(storage.KindModel, ref.Name, ref.Version)
}

func (s *serving) reconcile(ctx context.Context) {
	a := s.a
	if a.inf == nil || !a.art.Enabled() {
		return
	}
	want := s.wanted()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, m := range want {
		if cur, ok := s.loaded[key]; (ok && cur.digest == m.Digest) || s.loading[key] {
			continue
		}
		s.loading[key] = true
		go s.load(ctx, key, m)
	}
	for key, cur := range s.loaded {
		if _, ok := want[key]; ok || s.stillNeeded(key) {
			continue
		}
		if err := a.inf.Unload(cur.name, cur.version); err != nil && !errors.Is(err, infer.ErrModelNotFound) {
			a.log.Warn("unloading model", "model", cur.name, "err", err)
		}
		delete(s.loaded, key)
		a.log.Info("model unloaded", "policy", key, "model", cur.name, "version", cur.version)
	}
	s.publishLocked()
	a.drift.Sync(driftModels(s.loaded))
}

// stillNeeded says whether a model this node no longer is assigned must
// keep serving: make before break. While the policy exists and the nodes
// of its current placement do not all serve its current model yet, the old
// replica goes on answering (forwarded requests included).
func (s *serving) stillNeeded(key string) bool {
	a := s.a
	p, err := a.cat.Policies.Value(key)
	if err != nil {
		return false // deleted
	}
	doc, err := p.Document()
	if err != nil || doc.InferenceService == nil {
		return false
	}
	rec, ok := a.placements()[key]
	if !ok || rec.State != StatePlaced || len(rec.Nodes) == 0 {
		return true
	}
	ready := 0
	for _, pn := range rec.Nodes {
		m, err := a.modelManifest(a.modelFor(p, doc.InferenceService, pn.Name))
		if err != nil {
			return true
		}
		n, err := a.mesh.Node(pn.Name)
		if err == nil && n.Status == mesh.StatusAlive && slices.Contains(n.Models, m.Name+"@"+m.Version) {
			ready++
		}
	}
	return ready < len(rec.Nodes)
}

// load pulls (if needed) and loads one model version. Loading a new version
// of a served model swaps it in once it is ready; requests never fail.
func (s *serving) load(ctx context.Context, key string, m storage.Manifest) {
	a := s.a
	err := func() error {
		if !a.art.Store().Has(m.Digest) {
			if _, err := a.art.Pull(ctx, m, nil); err != nil {
				return fmt.Errorf("pull: %w", err)
			}
		}
		b, err := a.art.Bytes(m)
		if err != nil {
			return err
		}
		return a.inf.Load(ctx, m.Name, m.Version, b)
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.loading, key)
	if err != nil {
		a.log.Warn("loading model failed; will retry", "policy", key, "model", m.Ref(), "err", err)
		return
	}
	s.loaded[key] = servedModel{name: m.Name, version: m.Version, digest: m.Digest}
	a.log.Info("serving model", "policy", key, "model", m.Ref())
	s.publishLocked()
	a.drift.Sync(driftModels(s.loaded))
}

// publishLocked writes the models served here into the node's document.
func (s *serving) publishLocked() {
	var models []string
	for _, m := range s.loaded {
		models = append(models, m.name+"@"+m.version)
	}
	sort.Strings(models)
	models = slices.Compact(models)
	if slices.Equal(models, s.a.mesh.Local().Models) {
		return
	}
	if err := s.a.mesh.Update(func(st *mesh.NodeState) { st.Models = models }); err != nil {
		s.a.log.Warn("publishing served models", "err", err)
	}
}

package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/trainer"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/storage"
)

func parseKind(w http.ResponseWriter, s string) (storage.Kind, bool) {
	switch storage.Kind(s) {
	case "", storage.KindModel:
		return storage.KindModel, true
	case storage.KindDataset, storage.KindCode:
		return storage.Kind(s), true
	}
	httpjson.Error(w, http.StatusBadRequest, "kind", "kind %q: use model, dataset or code", s)
	return "", false
}

func (s *Server) needArtifacts(w http.ResponseWriter) bool {
	if !s.cfg.Artifacts.Enabled() {
		httpjson.Error(w, http.StatusServiceUnavailable, "", "%v", artifacts.ErrNoDataPlane)
		return false
	}
	return true
}

// handlePush stores the request body as a signed artifact:
// POST /v1/artifacts?name=N&version=V[&kind=dataset|code].
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "name", "version", "kind") || !s.needArtifacts(w) {
		return
	}
	kind, ok := parseKind(w, q.Get("kind"))
	if !ok {
		return
	}
	var ge *GateError
	if err := pushGate(kind, s.cfg.Mesh.Nodes()); errors.As(err, &ge) {
		httpjson.Error(w, http.StatusConflict, ge.Field, "%v", err)
		return
	}
	name, version := q.Get("name"), q.Get("version")
	if name == "" || version == "" {
		httpjson.Error(w, http.StatusBadRequest, "name", "name and version are required: POST /v1/artifacts?name=N&version=V")
		return
	}
	// Spool to the store's disk first: Publish reads the bytes twice (chunk
	// digests, then the blob) and must not hold a large model in memory.
	tmp, err := os.CreateTemp(s.cfg.SpoolDir, "upload-*")
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	defer os.Remove(tmp.Name())
	meta, field, err := spoolUpload(r, tmp)
	tmp.Close()
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	if kind == storage.KindCode {
		if err := checkCode(tmp.Name()); err != nil {
			httpjson.Error(w, http.StatusUnprocessableEntity, "file", "%v (pack a directory with strata push DIR --kind code)", err)
			return
		}
	}
	if kind == storage.KindModel {
		if meta == nil {
			meta = map[string]string{}
		}
		warning, err := s.checkModel(tmp.Name(), name, version, meta)
		if err != nil {
			httpjson.Error(w, http.StatusUnprocessableEntity, "file", "%v", err)
			return
		}
		if warning != "" {
			w.Header().Set(WarningHeader, warning)
		}
	}
	m, err := s.cfg.Artifacts.Publish(r.Context(), tmp.Name(), storage.PublishSpec{Kind: kind, Name: name, Version: version, Metadata: meta})
	switch {
	case errors.Is(err, storage.ErrExists):
		httpjson.Error(w, http.StatusConflict, "version", "%v", err)
		return
	case errors.Is(err, storage.ErrInvalidManifest):
		httpjson.Error(w, http.StatusBadRequest, "", "%v", err)
		return
	case err != nil:
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusCreated, m)
}

func (s *Server) handleArtifacts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "kind") {
		return
	}
	var kind storage.Kind
	if q.Has("kind") {
		var ok bool
		if kind, ok = parseKind(w, q.Get("kind")); !ok {
			return
		}
	}
	out := s.artifactsList(kind)
	if out == nil {
		out = []artifacts.Info{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// ModelInfo is one model with its versions, newest first.
type ModelInfo struct {
	Name     string           `json:"name"`
	Versions []artifacts.Info `json:"versions"`
}

func (s *Server) models() []ModelInfo {
	by := map[string][]artifacts.Info{}
	for _, info := range s.artifactsList(storage.KindModel) {
		by[info.Name] = append(by[info.Name], info)
	}
	out := []ModelInfo{}
	for name, vs := range by {
		sort.Slice(vs, func(i, j int) bool { return vs[i].Created.After(vs[j].Created) })
		out = append(out, ModelInfo{Name: name, Versions: vs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	httpjson.Write(w, http.StatusOK, s.models())
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	for _, m := range s.models() {
		if m.Name == r.PathValue("name") {
			httpjson.Write(w, http.StatusOK, m)
			return
		}
	}
	httpjson.Error(w, http.StatusNotFound, "", "no model named %q", r.PathValue("name"))
}

// handlePull fetches an artifact here and answers when it is held:
// POST /v1/artifacts/pull?name=N[&version=V][&kind=dataset].
func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "name", "version", "kind") || !s.needArtifacts(w) {
		return
	}
	kind, ok := parseKind(w, q.Get("kind"))
	if !ok {
		return
	}
	if q.Get("name") == "" {
		httpjson.Error(w, http.StatusBadRequest, "name", "name is required")
		return
	}
	m, err := s.cfg.Artifacts.Lookup(kind, q.Get("name"), q.Get("version"))
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "", "%s", trimMesh(err))
		return
	}
	res, err := s.cfg.Artifacts.Pull(r.Context(), m, nil)
	if err != nil {
		httpjson.Error(w, http.StatusBadGateway, "", "pull %s: %v", m.Ref(), err)
		return
	}
	httpjson.Write(w, http.StatusOK, res.Status)
}

func (s *Server) handleTransfers(w http.ResponseWriter, r *http.Request) {
	if !httpjson.CheckParams(w, r.URL.Query()) {
		return
	}
	out := []dataplane.TransferStatus{}
	if s.cfg.Artifacts.Enabled() {
		out = append(out, s.cfg.Artifacts.Node().Transfers()...)
	}
	httpjson.Write(w, http.StatusOK, out)
}

// maxReference bounds an uploaded drift reference.
const maxReference = 16 << 20

// spoolUpload copies an upload's bytes to dst. The body is the bytes
// themselves, or multipart/form-data with a "file" part and, for a model,
// an optional "reference" part: its drift reference (JSON, as the trainer
// writes reference.json), which goes into the signed manifest.
func spoolUpload(r *http.Request, dst io.Writer) (map[string]string, string, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		if _, err := io.Copy(dst, r.Body); err != nil {
			return nil, "", fmt.Errorf("reading upload: %w", err)
		}
		return nil, "", nil
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, "", fmt.Errorf("reading upload: %w", err)
	}
	var meta map[string]string
	file := false
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("reading upload: %w", err)
		}
		switch part.FormName() {
		case "file":
			if _, err := io.Copy(dst, part); err != nil {
				return nil, "file", fmt.Errorf("reading upload: %w", err)
			}
			file = true
		case "reference":
			b, err := io.ReadAll(io.LimitReader(part, maxReference+1))
			if err != nil {
				return nil, "reference", fmt.Errorf("reading the reference: %w", err)
			}
			if len(b) > maxReference {
				return nil, "reference", fmt.Errorf("the reference is over %d bytes", maxReference)
			}
			var ref drift.Reference
			if err := json.Unmarshal(b, &ref); err != nil || len(ref.Features) == 0 {
				return nil, "reference", fmt.Errorf("the reference is not a drift reference with features (as the trainer writes reference.json): %v", err)
			}
			names := make([]string, len(ref.Features))
			for i, f := range ref.Features {
				names[i] = f.Name
				if err := f.Validate(); err != nil {
					return nil, "reference", fmt.Errorf("the reference's features[%d]: %w", i, err)
				}
			}
			if p := ref.Prediction; p != nil {
				if err := p.Validate(); err != nil {
					return nil, "reference", fmt.Errorf("the reference's prediction: %w", err)
				}
			}
			meta = map[string]string{catalog.MetaReference: string(b), catalog.MetaFeatures: strings.Join(names, ",")}
		default:
			return nil, part.FormName(), fmt.Errorf("unknown part %q: send file and, optionally, reference", part.FormName())
		}
	}
	if !file {
		return nil, "file", errors.New("the upload has no file part")
	}
	return meta, "", nil
}

func trimMesh(err error) string { return strings.TrimPrefix(err.Error(), "mesh: ") }

// handleBlob streams a held artifact's bytes: GET
// /v1/artifacts/blob?kind=&name=&version= (newest when no version). A blob
// not held here is 404 (pull it first); one that turns out corrupt while
// it streams is quarantined and the response cut short, which the client
// sees as a truncated body (Content-Length is set).
func (s *Server) handleBlob(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "name", "version", "kind") || !s.needArtifacts(w) {
		return
	}
	kind, ok := parseKind(w, q.Get("kind"))
	if !ok {
		return
	}
	if q.Get("name") == "" {
		httpjson.Error(w, http.StatusBadRequest, "name", "name is required")
		return
	}
	m, err := s.cfg.Artifacts.Lookup(kind, q.Get("name"), q.Get("version"))
	if errors.Is(err, mesh.ErrNotFound) {
		httpjson.Error(w, http.StatusNotFound, "", "%s", trimMesh(err))
		return
	} else if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	if !s.cfg.Artifacts.Has(m.Digest) {
		httpjson.Error(w, http.StatusNotFound, "", "%s is not held on this node: pull it first (POST /v1/artifacts/pull, strata pull)", m.Ref())
		return
	}
	body, size, err := s.cfg.Artifacts.OpenVerified(m)
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	defer body.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Strata-Digest", m.Digest)
	h.Set("Strata-Ref", m.Ref())
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		s.log.Warn("serving a blob", "ref", m.Ref(), "err", err)
		panic(http.ErrAbortHandler) // cut the response: the client must not take it whole
	}
}

// WarningHeader carries what a push accepted but the pusher should know:
// the model could not be checked here, or ONNX Runtime here cannot run it.
const WarningHeader = "Strata-Warning"

// maxCheckedModel bounds the models read into memory to be checked.
const maxCheckedModel = 2 << 30

// checkModel validates a pushed model before it is published: it must be
// an ONNX model (else the error, answered 422), and its operator sets,
// producer, inputs and outputs go into meta, which the manifest signs.
// ONNX Runtime here opens it when it can; an operator it lacks is a
// warning, not a refusal: the agents that serve it may run another
// version.
func (s *Server) checkModel(path, name, version string, meta map[string]string) (warning string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Size() > maxCheckedModel {
		return fmt.Sprintf("not checked: %d bytes is over the %d checked", fi.Size(), maxCheckedModel), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	desc, err := infer.Describe(b)
	if err != nil {
		return "", fmt.Errorf("%s@%s is not an ONNX model: %w", name, version, err)
	}
	meta[catalog.MetaOpsets] = infer.FormatOpsets(desc.Opsets)
	meta[catalog.MetaInputs] = strings.Join(desc.Inputs, "; ")
	meta[catalog.MetaOutputs] = strings.Join(desc.Outputs, "; ")
	if desc.Producer != "" {
		meta[catalog.MetaProducer] = desc.Producer
	}
	if s.cfg.CheckModel == nil {
		return "not checked with ONNX Runtime: it is not installed on this agent", nil
	}
	if err := s.cfg.CheckModel(name, version, b); err != nil {
		if errors.Is(err, infer.ErrUnsupportedOperator) {
			return fmt.Sprintf("published, but this agent cannot serve it: %v", err), nil
		}
		return "", fmt.Errorf("ONNX Runtime cannot open %s@%s: %w", name, version, err)
	}
	return "", nil
}

// checkCode checks that a pushed code artifact is an archive a job can
// unpack (trainer.UnpackCode's rules), before it is signed and spread.
func checkCode(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return trainer.UnpackCode(f, "")
}

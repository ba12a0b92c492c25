package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/httpjson"
)

// maxCertRequest bounds a certificate request's body.
const maxCertRequest = 16 << 10

// ErrNameHeld is what IssueCert returns for a name another identity holds
// in the mesh: a certificate would let the asker pass for that node.
var ErrNameHeld = errors.New("the name is held by another node")

// handleIssueCert issues a node certificate to a new agent that presents a
// token with scope cert (checked in front of every route).
func (s *Server) handleIssueCert(w http.ResponseWriter, r *http.Request) {
	if s.cfg.IssueCert == nil {
		httpjson.Error(w, http.StatusConflict, "", "this agent holds no ca_key: ask an agent that does (bootstrap)")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCertRequest))
	if err != nil {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, "", "a certificate request is at most %d bytes", maxCertRequest)
		return
	}
	var req api.CertRequest
	if err := json.Unmarshal(body, &req); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "", "a certificate request is JSON {name, public_key, hosts}: %v", err)
		return
	}
	if req.Name == "" || req.PublicKey == "" {
		httpjson.Error(w, http.StatusBadRequest, "name", "name and public_key are required")
		return
	}
	cert, err := s.cfg.IssueCert(req)
	switch {
	case errors.Is(err, ErrNameHeld):
		httpjson.Error(w, http.StatusConflict, "name", "%v", err)
		return
	case err != nil:
		httpjson.Error(w, http.StatusBadRequest, "", "%v", err)
		return
	}
	s.log.Info("issued a node certificate", "name", req.Name, "remote", r.RemoteAddr)
	httpjson.Write(w, http.StatusCreated, api.CertResponse{Certificate: string(cert), IssuedBy: s.cfg.Mesh.Name()})
}

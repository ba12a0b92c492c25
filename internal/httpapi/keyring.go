package httpapi

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/mesh"
)

// Keyring is the agent's gossip keyring (*mesh.Mesh implements it).
type Keyring interface {
	Keyring() (mesh.KeyringStatus, error)
	InstallKey(key []byte) error
	UseKey(key []byte) error
	RemoveKey(key []byte) error
}

// handleKeyring lists this agent's gossip keys by fingerprint.
func (s *Server) handleKeyring(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Keyring == nil {
		httpjson.Error(w, http.StatusNotFound, "", "this agent has no gossip keyring")
		return
	}
	st, err := s.cfg.Keyring.Keyring()
	if err != nil {
		httpjson.Error(w, http.StatusConflict, "", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, api.Keyring{Primary: st.Primary, Keys: st.Keys})
}

// handleKeyringOp installs, uses or removes a gossip key on this agent.
func (s *Server) handleKeyringOp(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Keyring == nil {
		httpjson.Error(w, http.StatusNotFound, "", "this agent has no gossip keyring")
		return
	}
	var req api.KeyringRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "", "a keyring request is JSON {op, key}: %v", err)
		return
	}
	key, err := mesh.DecodeGossipKey(req.Key)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "key", "%v", err)
		return
	}
	var op func([]byte) error
	switch req.Op {
	case "install":
		op = s.cfg.Keyring.InstallKey
	case "use":
		op = s.cfg.Keyring.UseKey
	case "remove":
		op = s.cfg.Keyring.RemoveKey
	default:
		httpjson.Error(w, http.StatusBadRequest, "op", "op %q: use install, use or remove", req.Op)
		return
	}
	if err := op(key); err != nil {
		httpjson.Error(w, http.StatusConflict, "", "%v", err)
		return
	}
	s.log.Info("gossip keyring changed", "op", req.Op, "key", mesh.KeyFingerprint(key), "remote", r.RemoteAddr)
	st, _ := s.cfg.Keyring.Keyring()
	httpjson.Write(w, http.StatusOK, api.Keyring{Primary: st.Primary, Keys: st.Keys})
}

package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/policy"
)

// Policies are written only by controller-capable agents (their
// certificates say so; every agent refuses a policy record from any
// other). An agent without the role passes an apply or a delete to the
// nearest live controller over the data plane, whose mutual TLS names
// both ends, with the caller's token in HeaderForwardedToken: the
// controller checks the token against its own tokens, as if the caller
// had come to it, so a compromised edge agent can write no policy that a
// token valid on the controller did not ask for.

// HeaderForwardedToken carries the caller's API token on a policy write
// an agent passes to a controller. It is only ever sent over the data
// plane, to a controller-capable peer.
const HeaderForwardedToken = "Strata-Forwarded-Token"

// ScopeExec lets a token apply TrainingJobs whose launcher runs a command
// on the mesh's hosts (exec, torchrun). Tokens without it may apply every
// other policy.
const ScopeExec Scope = "exec"

// tokenKey is the context key of the token a request was authorized by;
// viaKey of the agent that passed a policy write here (authorizeForwarded).
type (
	tokenKey struct{}
	viaKey   struct{}
)

// passedBy is the agent that passed r here over the data plane, "" for a
// request made here. It is read from the context authorizeForwarded sets,
// never from a header a caller of this API could send.
func passedBy(r *http.Request) string {
	v, _ := r.Context().Value(viaKey{}).(string)
	return v
}

// withToken records on r the token that authorized it (nil: none was
// needed: an API with no tokens).
func withToken(r *http.Request, t *Token) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), tokenKey{}, t))
}

// requestToken is the token that authorized r, nil when none did.
func requestToken(r *http.Request) *Token {
	t, _ := r.Context().Value(tokenKey{}).(*Token)
	return t
}

// isController says whether this agent may write policies.
func (s *Server) isController() bool {
	me, err := s.cfg.Mesh.Node(s.cfg.Mesh.ID())
	return err == nil && me.Controller
}

// forwardWrite passes a policy write to the nearest live controller. It
// reports false, having answered nothing, when this agent is a
// controller itself or cannot forward (no data plane): the caller then
// writes locally.
func (s *Server) forwardWrite(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !s.cfg.Signed || s.isController() || s.cfg.Forwarder == nil {
		return false
	}
	targets := s.controllers()
	if len(targets) == 0 {
		httpjson.Error(w, http.StatusServiceUnavailable, "", "this agent is not controller-capable and no controller is reachable to write the policy: start an onprem or cloud agent, or an agent with controller: true")
		return true
	}
	h := http.Header{}
	h.Set("Content-Type", r.Header.Get("Content-Type"))
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		h.Set(HeaderForwardedToken, tok)
	}
	var lastErr error
	for _, n := range targets[:min(len(targets), 3)] {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		resp, err := s.cfg.Forwarder.SendWrite(ctx, n, r.Method, r.URL.RequestURI(), h, body)
		if err != nil {
			cancel()
			lastErr = fmt.Errorf("%s: %w", n.Name, err)
			continue
		}
		w.Header().Set("Strata-Written-By", n.Name)
		serving.CopyResponse(w, resp)
		cancel()
		return true
	}
	httpjson.Error(w, http.StatusBadGateway, "", "passing the write to a controller failed: %v", lastErr)
	return true
}

// controllers lists the live controller-capable peers with a data plane,
// nearest first.
func (s *Server) controllers() []mesh.Node {
	self := s.cfg.Mesh.ID()
	var out []mesh.Node
	rtt := map[string]time.Duration{}
	for _, n := range s.cfg.Mesh.Nodes() {
		if n.ID == self || !n.Controller || n.Status != mesh.StatusAlive || n.Addrs.Data == "" {
			continue
		}
		d, err := s.cfg.Mesh.RTT(self, n.ID)
		if err != nil {
			d = time.Hour
		}
		rtt[n.ID] = d
		out = append(out, n)
	}
	sort.SliceStable(out, func(i, j int) bool { return rtt[out[i].ID] < rtt[out[j].ID] })
	return out
}

// authorizeForwarded is the access control of policy writes other agents
// pass here over the data plane: the caller's token, carried in
// HeaderForwardedToken, must be one of this agent's with scope write.
// Where this agent has no tokens, only a mesh on one host (gossip bound
// to loopback, Config.LoopbackMesh) takes such writes: every agent there
// is the same host's.
func (s *Server) authorizeForwarded(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		peer := r.Header.Get(dataplane.HeaderPeer)
		if peer == "" {
			httpjson.Error(w, http.StatusForbidden, "", "policy writes are taken only from agents over the data plane")
			return
		}
		tokens := s.Tokens()
		if len(tokens) == 0 {
			if !s.cfg.LoopbackMesh {
				httpjson.Error(w, http.StatusForbidden, "", "%s passed a policy write here, and this controller has no API tokens to check the caller's: set acl_tokens (the same on every agent) for a mesh that spans hosts", peer)
				return
			}
			next(w, withToken(r.WithContext(context.WithValue(r.Context(), viaKey{}, peer)), nil))
			return
		}
		got := r.Header.Get(HeaderForwardedToken)
		sum := sha256.Sum256([]byte(got))
		var tok *Token
		for i := range tokens {
			if subtle.ConstantTimeCompare(sum[:], tokens[i].SHA256[:]) == 1 {
				tok = &tokens[i]
			}
		}
		switch {
		case got == "" || tok == nil:
			httpjson.Error(w, http.StatusUnauthorized, "", "%s passed a policy write here with no token valid on this controller: the caller needs a token valid on every agent (STRATA_TOKEN or -token)", peer)
			return
		case !slices.Contains(tok.Scopes, ScopeWrite):
			httpjson.Error(w, http.StatusForbidden, "", "token %q lacks scope %q", tok.Name, ScopeWrite)
			return
		}
		r.Header.Del(HeaderForwardedToken)
		next(w, withToken(r.WithContext(context.WithValue(r.Context(), viaKey{}, peer)), tok))
	}
}

// ErrExecScope is an apply of a job that runs commands by a token without
// ScopeExec.
var ErrExecScope = errors.New("httpapi: running commands needs a token with scope exec")

// checkExec refuses a TrainingJob whose launcher runs a command (exec,
// torchrun) unless the token that applies it holds ScopeExec. An API
// with no tokens (loopback only: the host's users are trusted) allows it.
func (s *Server) checkExec(r *http.Request, p catalog.Policy) error {
	doc, err := p.Document()
	if err != nil || doc.TrainingJob == nil {
		return nil
	}
	switch doc.TrainingJob.Launcher {
	case policy.LauncherExec, policy.LauncherTorchrun:
	default:
		return nil
	}
	tok := requestToken(r)
	if tok == nil && len(s.Tokens()) == 0 {
		return nil
	}
	if tok == nil || !slices.Contains(tok.Scopes, ScopeExec) {
		name := "none"
		if tok != nil {
			name = tok.Name
		}
		return fmt.Errorf("%w: %s uses launcher %s (token %s)", ErrExecScope, p.Key(), doc.TrainingJob.Launcher, name)
	}
	return nil
}

package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/strata-mesh/strata/internal/httpjson"
)

// Scope is what a token may do.
type Scope string

// Scopes. Every API call needs one: reads (GET, and POST /v1/plan and
// /v1/sim, which change nothing), inference (/v2), writes (apply, delete,
// push, pull).
const (
	ScopeRead  Scope = "read"
	ScopeInfer Scope = "infer"
	ScopeWrite Scope = "write"
	// ScopeCert lets a new node ask for its certificate from an agent
	// that holds the CA key (bootstrap).
	ScopeCert Scope = "cert"
)

// Scopes lists the valid scopes.
var Scopes = []Scope{ScopeRead, ScopeInfer, ScopeWrite, ScopeExec, ScopeCert}

// Token is one API token as the agent keeps it: its SHA-256 (never the
// token itself) and what it may do.
type Token struct {
	// Name says whose token it is, for logs.
	Name   string
	SHA256 [32]byte
	Scopes []Scope
}

// HashToken returns the hex SHA-256 of a token, as `acl_tokens` in the
// agent's configuration holds it (`strata token hash`).
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ParseTokenHash parses a hex SHA-256 token hash.
func ParseTokenHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(strings.TrimPrefix(s, "sha256:"))
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("token hash %q: want 64 hex digits (the SHA-256 of the token)", s)
	}
	copy(h[:], b)
	return h, nil
}

// DefaultAnonymous are the paths that answer without a token on an API
// bound off loopback.
var DefaultAnonymous = []string{"/v1/health", "/metrics"}

// scopeOf is the scope a request needs; "" means it may be anonymous.
func (s *Server) scopeOf(r *http.Request) Scope {
	p := r.URL.Path
	if slices.Contains(s.cfg.Anonymous, p) || strings.HasPrefix(p, "/ui/") || p == "/ui" {
		// The dashboard's assets hold no data: its calls to the API
		// carry the token.
		return ""
	}
	switch {
	case p == "/v2" || strings.HasPrefix(p, "/v2/"):
		return ScopeInfer
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/models/") && strings.HasSuffix(p, "/feedback"):
		// Ground truth comes from the clients that asked for predictions.
		return ScopeInfer
	case r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions:
		return ScopeRead
	case r.Method == http.MethodPost && (p == "/v1/plan" || p == "/v1/sim"):
		return ScopeRead
	case p == "/v1/pki/certificates":
		return ScopeCert
	}
	return ScopeWrite
}

// loopback says whether the API listens on loopback only (decided in New).
func (s *Server) loopback() bool { return s.onLoopback }

// onLoopback says whether addr (host:port, from Config.Addr) is a loopback
// address.
func onLoopback(addr func() string) bool {
	if addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SetTokens replaces the API's tokens (a configuration reload): calls
// from then on are checked against these.
func (s *Server) SetTokens(tokens []Token) {
	tokens = slices.Clone(tokens)
	s.tokens.Store(&tokens)
}

// Tokens returns the tokens in force.
func (s *Server) Tokens() []Token {
	if t := s.tokens.Load(); t != nil {
		return *t
	}
	return s.cfg.Tokens
}

// authorize is the API's access control, in front of every route:
//   - with no token configured, a loopback-bound API answers everything
//     (the host's users are trusted), and one bound off loopback answers
//     only the anonymous paths;
//   - with tokens configured, every call but the anonymous paths needs
//     "Authorization: Bearer TOKEN" with the call's scope; on a loopback
//     API, reads and inference stay open, as they were without tokens.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := s.scopeOf(r)
		if need == "" {
			next.ServeHTTP(w, r)
			return
		}
		loop := s.loopback()
		tokens := s.Tokens()
		if len(tokens) == 0 {
			if loop {
				next.ServeHTTP(w, r)
				return
			}
			httpjson.Error(w, http.StatusForbidden, "", "this API is bound off loopback and has no tokens: set api_token or acl_tokens in the agent's config")
			return
		}
		if loop && (need == ScopeRead || need == ScopeInfer) && r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		auth := r.Header.Get("Authorization")
		got, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
			httpjson.Error(w, http.StatusUnauthorized, "", "a token with scope %q is required: the CLI sends $STRATA_TOKEN (or -token TOKEN); others send Authorization: Bearer TOKEN", need)
			return
		}
		sum := sha256.Sum256([]byte(got))
		var tok *Token
		for i := range tokens {
			if subtle.ConstantTimeCompare(sum[:], tokens[i].SHA256[:]) == 1 {
				tok = &tokens[i]
			}
		}
		if tok == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata", error="invalid_token"`)
			httpjson.Error(w, http.StatusUnauthorized, "", "the token is not valid here")
			return
		}
		if !slices.Contains(tok.Scopes, need) {
			httpjson.Error(w, http.StatusForbidden, "", "token %q lacks scope %q for %s %s", tok.Name, need, r.Method, r.URL.Path)
			return
		}
		next.ServeHTTP(w, withToken(r, tok))
	})
}

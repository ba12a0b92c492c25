package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAuthorize(t *testing.T) {
	t.Parallel()
	mk := func(addr string, tokens map[string][]Scope) http.Handler {
		var toks []Token
		for tok, scopes := range tokens {
			sum, _ := ParseTokenHash(HashToken(tok))
			toks = append(toks, Token{Name: tok + "-name", SHA256: sum, Scopes: scopes})
		}
		s := &Server{cfg: Config{Tokens: toks, Anonymous: DefaultAnonymous}, onLoopback: onLoopback(func() string { return addr })}
		return s.authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	}
	const ok = http.StatusTeapot
	tokens := map[string][]Scope{"reader": {ScopeRead}, "caller": {ScopeInfer}, "admin": Scopes, "newcomer": {ScopeCert}}
	cases := []struct {
		name, addr, method, path, auth string
		tokens                         map[string][]Scope
		want                           int
	}{
		{"loopback, no tokens: reads", "127.0.0.1:7470", "GET", "/v1/nodes", "", nil, ok},
		{"loopback, no tokens: writes", "127.0.0.1:7470", "POST", "/v1/policies", "", nil, ok},
		{"off loopback, no tokens: health", "0.0.0.0:7470", "GET", "/v1/health", "", nil, ok},
		{"off loopback, no tokens: metrics", "10.0.0.1:7470", "GET", "/metrics", "", nil, ok},
		{"off loopback, no tokens: reads refused", "0.0.0.0:7470", "GET", "/v1/nodes", "", nil, http.StatusForbidden},
		{"off loopback, no tokens: inference refused", "[::]:7470", "POST", "/v2/models/m/infer", "", nil, http.StatusForbidden},
		{"off loopback: no token", "0.0.0.0:7470", "GET", "/v1/nodes", "", tokens, http.StatusUnauthorized},
		{"off loopback: token without Bearer", "0.0.0.0:7470", "GET", "/v1/nodes", "reader", tokens, http.StatusUnauthorized},
		{"off loopback: wrong token", "0.0.0.0:7470", "GET", "/v1/nodes", "Bearer nope", tokens, http.StatusUnauthorized},
		{"off loopback: read scope reads", "0.0.0.0:7470", "GET", "/v1/nodes", "Bearer reader", tokens, ok},
		{"off loopback: read scope plans", "0.0.0.0:7470", "POST", "/v1/plan", "Bearer reader", tokens, ok},
		{"off loopback: read scope cannot apply", "0.0.0.0:7470", "POST", "/v1/policies", "Bearer reader", tokens, http.StatusForbidden},
		{"off loopback: read scope cannot infer", "0.0.0.0:7470", "POST", "/v2/models/m/infer", "Bearer reader", tokens, http.StatusForbidden},
		{"off loopback: infer scope infers", "0.0.0.0:7470", "POST", "/v2/models/m/infer", "Bearer caller", tokens, ok},
		{"off loopback: infer scope cannot read", "0.0.0.0:7470", "GET", "/v1/nodes", "Bearer caller", tokens, http.StatusForbidden},
		{"off loopback: all scopes delete", "0.0.0.0:7470", "DELETE", "/v1/policies/InferenceService/x", "Bearer admin", tokens, ok},
		{"off loopback: health needs no token", "0.0.0.0:7470", "GET", "/v1/health", "", tokens, ok},
		{"loopback with tokens: reads stay open", "127.0.0.1:7470", "GET", "/v1/nodes", "", tokens, ok},
		{"loopback with tokens: writes need one", "127.0.0.1:7470", "POST", "/v1/policies", "", tokens, http.StatusUnauthorized},
		{"loopback with tokens: certificates need one", "127.0.0.1:7470", "POST", "/v1/pki/certificates", "", tokens, http.StatusUnauthorized},
		{"off loopback: cert scope gets a certificate", "0.0.0.0:7470", "POST", "/v1/pki/certificates", "Bearer newcomer", tokens, ok},
		{"off loopback: cert scope cannot apply", "0.0.0.0:7470", "POST", "/v1/policies", "Bearer newcomer", tokens, http.StatusForbidden},
		{"off loopback: read scope cannot get a certificate", "0.0.0.0:7470", "POST", "/v1/pki/certificates", "Bearer reader", tokens, http.StatusForbidden},
		{"loopback with tokens: a bad token is refused even for reads", "127.0.0.1:7470", "GET", "/v1/nodes", "Bearer nope", tokens, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			mk(tc.addr, tc.tokens).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s %s = %d, want %d: %s", tc.method, tc.path, rec.Code, tc.want, rec.Body)
			}
		})
	}
}

func TestParseTokenHash(t *testing.T) {
	t.Parallel()
	if _, err := ParseTokenHash(HashToken("x")); err != nil {
		t.Errorf("a hash made by HashToken: %v", err)
	}
	if _, err := ParseTokenHash("sha256:" + HashToken("x")); err != nil {
		t.Errorf("with a sha256: prefix: %v", err)
	}
	for _, bad := range []string{"", "abc", HashToken("x")[:62], "zz" + HashToken("x")[2:]} {
		if _, err := ParseTokenHash(bad); err == nil {
			t.Errorf("ParseTokenHash(%q): no error", bad)
		}
	}
}

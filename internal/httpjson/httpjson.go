// Package httpjson writes the agent's JSON responses and errors, the same
// shape for every component that serves part of the HTTP API:
//
//	httpjson.Write(w, http.StatusOK, v)
//	httpjson.Error(w, http.StatusBadRequest, "since", "since=%q: want a number", s)
//	if !httpjson.CheckParams(w, r.URL.Query(), "model") { return }
package httpjson

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ErrorBody is the body of every error response: what went wrong, and the
// request field (query parameter, policy field) it is about, if any.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Write answers v as indented JSON with the status code.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers an ErrorBody with the status code.
func Error(w http.ResponseWriter, code int, field, format string, args ...any) {
	Write(w, code, ErrorBody{Error: fmt.Sprintf(format, args...), Field: field})
}

// CheckParams rejects query parameters the endpoint does not know with a
// 400, so a typo is an error instead of a silently ignored filter. It
// reports whether the request may go on.
func CheckParams(w http.ResponseWriter, q url.Values, allowed ...string) bool {
	for k := range q {
		if !slices.Contains(allowed, k) {
			Error(w, http.StatusBadRequest, k, "unknown query parameter %q (allowed: %s)", k, strings.Join(allowed, ", "))
			return false
		}
	}
	return true
}

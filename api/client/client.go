package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/strata-mesh/strata/api"
)

// DefaultAddr is the API address an agent listens on by default.
const DefaultAddr = "http://127.0.0.1:7470"

// ClientName is what every request names its sender in the Strata-Client
// header (api.HeaderClient): it tells the agent the request is not a
// browser's.
const ClientName = "strata-go"

// Client calls one agent's HTTP API. It is safe for concurrent use; its
// settings are fixed by New.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as a bearer token on every request. Agents that
// set api_token require it on mutating calls (apply, delete, push, pull).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends requests through hc instead of
// http.DefaultClient. Its Timeout, if any, bounds every call, uploads and
// event streams included; prefer a context deadline per call.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the agent whose API is at addr: a URL
// ("http://10.0.0.5:7470") or host:port, which means http. An empty addr
// is DefaultAddr. New does no I/O; a bad address shows in the first call.
func New(addr string, opts ...Option) *Client {
	if addr == "" {
		addr = DefaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	c := &Client{base: strings.TrimSuffix(addr, "/"), hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	return c
}

// Addr is the API's base URL, as requests use it.
func (c *Client) Addr() string { return c.base }

// CallOption changes one call.
type CallOption func(*call)

type call struct {
	bodies  []*[]byte
	headers []*http.Header
}

// Header stores the response headers of a successful call in *dst (a
// push's Strata-Warning, for one).
func Header(dst *http.Header) CallOption {
	return func(c *call) { c.headers = append(c.headers, dst) }
}

// Body stores the response body of a successful call, as the agent sent
// it, in *dst: a CLI can print the agent's JSON unchanged while the call
// still returns typed values.
func Body(dst *[]byte) CallOption { return func(c *call) { c.bodies = append(c.bodies, dst) } }

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	contentType  string
	body         io.Reader
	// size is the body's length, -1 when unknown (sent chunked).
	size int64
}

// send makes the request and returns the response when its status is
// below 300; any other status is an *Error, and the body is closed.
// Transport errors come back as http.Client.Do returns them (a
// *url.Error naming the method and URL).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, err
	}
	if r.body != nil && r.size >= 0 {
		req.ContentLength = r.size
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	req.Header.Set(api.HeaderClient, ClientName)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	// No API path answers HTML: below 500 a web server, a router's page
	// or a proxy's login is at the address, not an agent. A 5xx page is a
	// gateway's in front of an agent that did not answer: an *Error with
	// its text, as before.
	if mediaType(resp) == "text/html" && resp.StatusCode < 500 {
		resp.Body.Close()
		return nil, &NotAgentError{URL: c.base, ContentType: "text/html", Status: resp.StatusCode}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return nil, fmt.Errorf("client: reading the error of %s %s (HTTP %d): %w", r.method, r.path, resp.StatusCode, err)
		}
		return nil, decodeError(resp.StatusCode, b)
	}
	return resp, nil
}

// do makes the request and decodes a JSON answer into v (when not nil).
func (c *Client) do(ctx context.Context, r request, v any, opts []CallOption) error {
	var cl call
	for _, o := range opts {
		o(&cl)
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("client: reading the answer of %s %s: %w", r.method, r.path, err)
	}
	for _, dst := range cl.bodies {
		*dst = b
	}
	for _, dst := range cl.headers {
		*dst = resp.Header
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		if mt := mediaType(resp); mt != "application/json" {
			return &NotAgentError{URL: c.base, ContentType: mt, Status: resp.StatusCode}
		}
		return fmt.Errorf("client: decoding the answer of %s %s: %w", r.method, r.path, err)
	}
	return nil
}

// mediaType is the response's Content-Type without parameters, lower
// case; "" when it has none or it does not parse.
func mediaType(resp *http.Response) string {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt
}

// NotAgentError is an answer that did not come from a strata agent's
// API: an HTML page, or a body that is neither the JSON a call expects
// nor labelled as JSON. Another service listens at the address, or a
// proxy answered for it.
type NotAgentError struct {
	// URL is the address the client was made with.
	URL string
	// ContentType is the answer's media type, "" when it named none.
	ContentType string
	// Status is the answer's HTTP status code.
	Status int
}

func (e *NotAgentError) Error() string {
	ct := e.ContentType
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("%s answered with %s (HTTP %d): not a strata agent's API", e.URL, ct, e.Status)
}

// get is a GET of path with query, decoded into v.
func (c *Client) get(ctx context.Context, path string, query url.Values, v any, opts []CallOption) error {
	return c.do(ctx, request{method: http.MethodGet, path: path, query: query, size: -1}, v, opts)
}

// sendBytes sends an in-memory body.
func (c *Client) sendBytes(ctx context.Context, method, path string, query url.Values, contentType string, body []byte, v any, opts []CallOption) error {
	r := request{method: method, path: path, query: query, contentType: contentType, size: -1}
	if body != nil {
		r.body, r.size = bytes.NewReader(body), int64(len(body))
	}
	return c.do(ctx, r, v, opts)
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// Error is an answer of the API with a status of 300 or more. errors.As
// finds it in any error a Client method returns:
//
//	var ae *client.Error
//	if errors.As(err, &ae) && ae.Status == http.StatusNotFound { ... }
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Message is the agent's "error" field; for an answer that is not the
	// API's JSON (a proxy's page, a crash), the body as text.
	Message string
	// Field is the request field the error is about (a query parameter, a
	// policy field), if the agent named one.
	Field string
	// Problems lists every positioned error of a policy that does not
	// parse or validate (POST /v1/policies, POST /v1/plan).
	Problems []api.PolicyError
	// JSON is false when the body was not the API's JSON error.
	JSON bool
}

// Error formats the error as the CLI prints it: a policy's problems one
// per line, the agent's message with the status, or the status with the
// body.
func (e *Error) Error() string {
	switch {
	case len(e.Problems) > 0:
		lines := make([]string, len(e.Problems))
		for i, p := range e.Problems {
			lines[i] = p.String()
		}
		return fmt.Sprintf("the policy has %d error(s):\n%s", len(lines), strings.Join(lines, "\n"))
	case e.JSON:
		return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// decodeError reads an error answer: {"error": ..., "field": ...,
// "errors": [...]} or anything else.
func decodeError(status int, body []byte) *Error {
	var b struct {
		Error  string            `json:"error"`
		Field  string            `json:"field"`
		Errors []api.PolicyError `json:"errors"`
	}
	if json.Unmarshal(body, &b) == nil && (b.Error != "" || len(b.Errors) > 0) {
		return &Error{Status: status, Message: b.Error, Field: b.Field, Problems: b.Errors, JSON: true}
	}
	return &Error{Status: status, Message: strings.TrimSpace(string(body))}
}

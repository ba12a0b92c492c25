package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"

	"github.com/strata-mesh/strata/api"
)

// Health asks whether the agent answers: GET /v1/health.
func (c *Client) Health(ctx context.Context, opts ...CallOption) (api.Health, error) {
	var h api.Health
	err := c.get(ctx, "/v1/health", nil, &h, opts)
	return h, err
}

// Self returns the answering agent's own node: GET /v1/agent/self.
func (c *Client) Self(ctx context.Context, opts ...CallOption) (api.Node, error) {
	var n api.Node
	err := c.get(ctx, "/v1/agent/self", nil, &n, opts)
	return n, err
}

// Members lists the members of the agent's site: GET /v1/members.
func (c *Client) Members(ctx context.Context, opts ...CallOption) ([]api.Member, error) {
	var ms []api.Member
	err := c.get(ctx, "/v1/members", nil, &ms, opts)
	return ms, err
}

// Sites summarizes the sites the agent knows and their reachability: GET
// /v1/sites.
func (c *Client) Sites(ctx context.Context, opts ...CallOption) ([]api.Site, error) {
	var ss []api.Site
	err := c.get(ctx, "/v1/sites", nil, &ss, opts)
	return ss, err
}

// NodeFilter selects nodes; the zero value selects all. Every set field
// must match.
type NodeFilter struct {
	Tier string
	Site string
	// Labels are k=v pairs, each of which a node must carry.
	Labels []string
}

func (f NodeFilter) query() url.Values {
	q := url.Values{}
	if f.Tier != "" {
		q.Set("tier", f.Tier)
	}
	if f.Site != "" {
		q.Set("site", f.Site)
	}
	for _, l := range f.Labels {
		q.Add("label", l)
	}
	return q
}

// Nodes lists the nodes the agent knows that match f: GET /v1/nodes.
func (c *Client) Nodes(ctx context.Context, f NodeFilter, opts ...CallOption) ([]api.Node, error) {
	var ns []api.Node
	err := c.get(ctx, "/v1/nodes", f.query(), &ns, opts)
	return ns, err
}

// Node returns one node by name or ID: GET /v1/nodes/{id}. An unknown node
// is an *Error with Status 404.
func (c *Client) Node(ctx context.Context, nameOrID string, opts ...CallOption) (api.Node, error) {
	var n api.Node
	err := c.get(ctx, "/v1/nodes/"+url.PathEscape(nameOrID), nil, &n, opts)
	return n, err
}

// RTT estimates the round-trip time between two nodes from their
// coordinates: GET /v1/rtt. An empty from is the agent's own node. A node
// without a coordinate yet is an *Error with Status 503.
func (c *Client) RTT(ctx context.Context, from, to string, opts ...CallOption) (api.RTT, error) {
	q := url.Values{"to": {to}}
	if from != "" {
		q.Set("from", from)
	}
	var r api.RTT
	err := c.get(ctx, "/v1/rtt", q, &r, opts)
	return r, err
}

// Policies lists the applied policies: GET /v1/policies.
func (c *Client) Policies(ctx context.Context, opts ...CallOption) ([]api.Policy, error) {
	var ps []api.Policy
	err := c.get(ctx, "/v1/policies", nil, &ps, opts)
	return ps, err
}

// Apply applies the policies in doc (YAML, one or more documents): POST
// /v1/policies. file names doc in error messages ("svc.yaml"). A policy
// that does not parse or validate is an *Error with its Problems; nothing
// of doc is applied then.
func (c *Client) Apply(ctx context.Context, file string, doc []byte, opts ...CallOption) ([]api.ApplyResult, error) {
	var rs []api.ApplyResult
	err := c.sendBytes(ctx, http.MethodPost, "/v1/policies", fileQuery(file), "application/yaml", doc, &rs, opts)
	return rs, err
}

// Plan places the policies in doc without applying them: POST /v1/plan.
// why, when not empty, names a node whose choice or rejection each result
// explains. A result that is not Decision.Feasible is not an error.
func (c *Client) Plan(ctx context.Context, file string, doc []byte, why string, opts ...CallOption) ([]api.PlanResult, error) {
	q := fileQuery(file)
	if why != "" {
		q.Set("why", why)
	}
	var rs []api.PlanResult
	err := c.sendBytes(ctx, http.MethodPost, "/v1/plan", q, "application/yaml", doc, &rs, opts)
	return rs, err
}

func fileQuery(file string) url.Values {
	q := url.Values{}
	if file != "" {
		q.Set("file", file)
	}
	return q
}

// DeletePolicy deletes the policy kind/name: DELETE
// /v1/policies/{kind}/{name}. An unknown policy is an *Error with Status
// 404.
func (c *Client) DeletePolicy(ctx context.Context, kind, name string, opts ...CallOption) error {
	return c.sendBytes(ctx, http.MethodDelete, "/v1/policies/"+url.PathEscape(kind)+"/"+url.PathEscape(name), nil, "", nil, nil, opts)
}

// Placements lists every policy's placement: GET /v1/placements.
func (c *Client) Placements(ctx context.Context, opts ...CallOption) ([]api.PlacementStatus, error) {
	var ps []api.PlacementStatus
	err := c.get(ctx, "/v1/placements", nil, &ps, opts)
	return ps, err
}

// Artifacts lists the artifacts of kind (api.KindModel, api.KindDataset,
// or "" for both) with their holders: GET /v1/artifacts.
func (c *Client) Artifacts(ctx context.Context, kind string, opts ...CallOption) ([]api.Artifact, error) {
	q := url.Values{}
	if kind != "" {
		q.Set("kind", kind)
	}
	var as []api.Artifact
	err := c.get(ctx, "/v1/artifacts", q, &as, opts)
	return as, err
}

// Models lists the models with their versions: GET /v1/models.
func (c *Client) Models(ctx context.Context, opts ...CallOption) ([]api.Model, error) {
	var ms []api.Model
	err := c.get(ctx, "/v1/models", nil, &ms, opts)
	return ms, err
}

// Model returns one model's versions: GET /v1/models/{name}.
func (c *Client) Model(ctx context.Context, name string, opts ...CallOption) (api.Model, error) {
	var m api.Model
	err := c.get(ctx, "/v1/models/"+url.PathEscape(name), nil, &m, opts)
	return m, err
}

// PushSpec names the version a Push publishes.
type PushSpec struct {
	// Kind is api.KindModel (the default when empty) or api.KindDataset.
	Kind    string
	Name    string
	Version string
	// Reference, for a model, is its drift reference (reference.json as
	// the trainer writes it); it is signed into the manifest so agents
	// that serve the model can detect drift. Nil: none.
	Reference []byte
}

// Push publishes body as a signed, immutable artifact version: POST
// /v1/artifacts. size is body's length, or -1 when unknown. The body is
// streamed; Push reads it to the end or until the call fails. A version
// that exists is an *Error with Status 409.
func (c *Client) Push(ctx context.Context, spec PushSpec, body io.Reader, size int64, opts ...CallOption) (api.Manifest, error) {
	kind := spec.Kind
	if kind == "" {
		kind = api.KindModel
	}
	q := url.Values{"name": {spec.Name}, "version": {spec.Version}, "kind": {kind}}
	r := request{method: http.MethodPost, path: "/v1/artifacts", query: q, contentType: "application/octet-stream", body: body, size: size}
	if spec.Reference != nil {
		// multipart: the reference first, then the bytes, streamed.
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			pw.CloseWithError(writeParts(mw, spec, body))
		}()
		defer pr.Close() // unblocks the writer if the request fails early
		r.body, r.size, r.contentType = pr, -1, mw.FormDataContentType()
	}
	var m api.Manifest
	err := c.do(ctx, r, &m, opts)
	return m, err
}

func writeParts(mw *multipart.Writer, spec PushSpec, body io.Reader) error {
	rp, err := mw.CreateFormFile("reference", "reference.json")
	if err != nil {
		return err
	}
	if _, err := rp.Write(spec.Reference); err != nil {
		return err
	}
	fp, err := mw.CreateFormFile("file", spec.Name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(fp, body); err != nil {
		return err
	}
	return mw.Close()
}

// Pull fetches an artifact's bytes to the agent from the nearest holders
// and returns when the agent holds them: POST /v1/artifacts/pull. An
// empty kind is a model; an empty version the newest. Transfers shows the
// progress of a pull under way.
func (c *Client) Pull(ctx context.Context, kind, name, version string, opts ...CallOption) (api.TransferStatus, error) {
	if kind == "" {
		kind = api.KindModel
	}
	q := url.Values{"name": {name}, "kind": {kind}}
	if version != "" {
		q.Set("version", version)
	}
	var st api.TransferStatus
	err := c.sendBytes(ctx, http.MethodPost, "/v1/artifacts/pull", q, "", nil, &st, opts)
	return st, err
}

// Transfers lists the agent's pulls, running and recent: GET
// /v1/transfers.
func (c *Client) Transfers(ctx context.Context, opts ...CallOption) ([]api.TransferStatus, error) {
	var ts []api.TransferStatus
	err := c.get(ctx, "/v1/transfers", nil, &ts, opts)
	return ts, err
}

// Drift lists the drift monitors of every node, of model only when model
// is not empty: GET /v1/drift.
func (c *Client) Drift(ctx context.Context, model string, opts ...CallOption) ([]api.Drift, error) {
	q := url.Values{}
	if model != "" {
		q.Set("model", model)
	}
	var ds []api.Drift
	err := c.get(ctx, "/v1/drift", q, &ds, opts)
	return ds, err
}

// Jobs lists training jobs, newest first: GET /v1/jobs.
func (c *Client) Jobs(ctx context.Context, opts ...CallOption) ([]api.Job, error) {
	var js []api.Job
	err := c.get(ctx, "/v1/jobs", nil, &js, opts)
	return js, err
}

// Job returns one training job: GET /v1/jobs/{name}. An unknown job is an
// *Error with Status 404.
func (c *Client) Job(ctx context.Context, name string, opts ...CallOption) (api.Job, error) {
	var j api.Job
	err := c.get(ctx, "/v1/jobs/"+url.PathEscape(name), nil, &j, opts)
	return j, err
}

// JobLogs returns the output of a job's gang member rank (0 for the
// first): GET /v1/jobs/{name}/logs. Any agent answers; it fetches the log
// from the node that ran the member.
func (c *Client) JobLogs(ctx context.Context, name string, rank int, opts ...CallOption) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("client: rank %d: want a member index from 0", rank)
	}
	var raw []byte
	opts = append(opts[:len(opts):len(opts)], Body(&raw))
	err := c.get(ctx, "/v1/jobs/"+url.PathEscape(name)+"/logs", url.Values{"rank": {strconv.Itoa(rank)}}, nil, opts)
	return string(raw), err
}

// Blob is an artifact's bytes as the agent streams them.
type Blob struct {
	// Body is the bytes; the caller closes it.
	Body io.ReadCloser
	// Size is the length in bytes.
	Size int64
	// Digest is the SHA-256 (hex) the bytes must hash to: check it.
	Digest string
	// Ref names the artifact (kind/name@version).
	Ref string
}

// Blob streams a held artifact's bytes: GET /v1/artifacts/blob. An
// artifact the agent does not hold is a 404 *Error (pull it first). The
// agent cuts the body short when its copy turns out corrupt, so a reader
// that gets fewer than Size bytes, or bytes that do not hash to Digest,
// must discard them.
func (c *Client) Blob(ctx context.Context, kind, name, version string) (*Blob, error) {
	if kind == "" {
		kind = api.KindModel
	}
	q := url.Values{"name": {name}, "kind": {kind}}
	if version != "" {
		q.Set("version", version)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/artifacts/blob", query: q, size: -1})
	if err != nil {
		return nil, err
	}
	return &Blob{Body: resp.Body, Size: resp.ContentLength, Digest: resp.Header.Get("Strata-Digest"), Ref: resp.Header.Get("Strata-Ref")}, nil
}

// Lineage returns a model version's lineage chain (version "" is the
// newest).
func (c *Client) Lineage(ctx context.Context, name, version string, opts ...CallOption) (api.LineageChain, error) {
	var out api.LineageChain
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	err := c.get(ctx, "/v1/lineage/"+url.PathEscape(name), q, &out, opts)
	return out, err
}

// Experiments lists the hyperparameter searches, newest first.
func (c *Client) Experiments(ctx context.Context, opts ...CallOption) ([]api.Experiment, error) {
	var out []api.Experiment
	err := c.get(ctx, "/v1/experiments", nil, &out, opts)
	return out, err
}

// Experiment returns one search with its trials.
func (c *Client) Experiment(ctx context.Context, name string, opts ...CallOption) (api.Experiment, error) {
	var out api.Experiment
	err := c.get(ctx, "/v1/experiments/"+url.PathEscape(name), nil, &out, opts)
	return out, err
}

// WhatIf plans every applied policy on the mesh as it is and with the
// changes ("site edge-b down", "add 4 nodes like gpu-1 in rack rack-2",
// "policy fraud-scorer latency.p99=10ms"): POST /v1/sim. Nothing changes.
func (c *Client) WhatIf(ctx context.Context, changes []string, opts ...CallOption) (api.WhatIfReport, error) {
	var out api.WhatIfReport
	body, err := json.Marshal(map[string][]string{"what_if": changes})
	if err != nil {
		return out, err
	}
	err = c.sendBytes(ctx, http.MethodPost, "/v1/sim", nil, "application/json", body, &out, opts)
	return out, err
}

// Keyring lists the agent's gossip keys by fingerprint: GET /v1/keyring.
func (c *Client) Keyring(ctx context.Context, opts ...CallOption) (api.Keyring, error) {
	var k api.Keyring
	err := c.get(ctx, "/v1/keyring", nil, &k, opts)
	return k, err
}

// KeyringOp installs, uses or removes a gossip key on the agent: POST
// /v1/keyring.
func (c *Client) KeyringOp(ctx context.Context, op, key string, opts ...CallOption) (api.Keyring, error) {
	var k api.Keyring
	body, err := json.Marshal(api.KeyringRequest{Op: op, Key: key})
	if err != nil {
		return k, err
	}
	err = c.sendBytes(ctx, http.MethodPost, "/v1/keyring", nil, "application/json", body, &k, opts)
	return k, err
}

// IssueCert asks an agent that holds the mesh CA key for a node
// certificate: POST /v1/pki/certificates, with a token of scope cert.
func (c *Client) IssueCert(ctx context.Context, req api.CertRequest, opts ...CallOption) (api.CertResponse, error) {
	var res api.CertResponse
	body, err := json.Marshal(req)
	if err != nil {
		return res, err
	}
	err = c.sendBytes(ctx, http.MethodPost, "/v1/pki/certificates", nil, "application/json", body, &res, opts)
	return res, err
}

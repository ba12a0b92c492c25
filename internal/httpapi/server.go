// Package httpapi is the agent's HTTP API: /v1 (mesh, policies, placements,
// artifacts, drift, jobs, events), /metrics and the Open Inference Protocol
// under /v2. It reads the mesh and the catalog and calls the other
// components through the narrow interfaces in Config; it owns no state.
//
//	s := httpapi.New(httpapi.Config{Mesh: m, Catalog: cat, Artifacts: svc, ...})
//	http.Serve(ln, s.Handler())
package httpapi

import (
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/storage"
)

// Mesh is what the API reads of the mesh.
type Mesh interface {
	ID() string
	Name() string
	Members() []mesh.Member
	Nodes() []mesh.Node
	Node(nameOrID string) (mesh.Node, error)
	RTT(a, b string) (time.Duration, error)
}

// Jobs reads the output of training jobs run on this node.
type Jobs interface {
	Logs(name string, rank int) (string, error)
}

// Config wires the API to the agent's components. Every field is required
// unless its doc says otherwise.
type Config struct {
	Mesh      Mesh
	Catalog   *catalog.Catalog
	Artifacts *artifacts.Service
	Jobs      Jobs
	Forwarder *serving.Forwarder
	// Events streams GET /v1/events.
	Events http.Handler
	// RemoteSites lists the sites known through federation (optional:
	// nil where each agent sees every site's nodes).
	RemoteSites func() []mesh.Site
	// Inference serves /v2; nil when ONNX Runtime is not available, and
	// InferenceErr says why.
	Inference    http.Handler
	InferenceErr error
	// CheckModel opens a pushed model with ONNX Runtime without serving
	// it; nil when ONNX Runtime is not available here.
	CheckModel func(name, version string, model []byte) error
	// Feedback keeps posted ground truth for a drift capture (POST
	// /v1/models/{name}/feedback); its errors wrap
	// driftwatch.ErrNotWatched or driftwatch.ErrFeedback. Nil where this
	// agent serves no models.
	Feedback func(model string, rows [][]float64, labels []string) (api.FeedbackResult, error)
	// Compile turns an applied policy into a placement request (plan).
	Compile func(catalog.Policy) (*placement.Request, error)
	// HandOff, optional (federated only), picks the site a policy that no
	// node of this site can take would be handed to (plan says so).
	HandOff func(catalog.Policy, *placement.Request) (site, why string)
	// IssueCert issues a node certificate (POST /v1/pki/certificates);
	// nil when this agent holds no CA key.
	IssueCert func(api.CertRequest) ([]byte, error)
	// Registry is gathered at /metrics.
	Registry prometheus.Gatherer
	// Registerer, optional, receives the API's own metrics
	// (strata_api_requests_refused_total).
	Registerer prometheus.Registerer
	// Tokens are the API's tokens with their scopes. Without any, a
	// loopback-bound API answers everything and one bound off loopback
	// only the Anonymous paths.
	Tokens []Token
	// Keyring is the agent's gossip keyring (optional: /v1/keyring
	// answers 404 without it).
	Keyring Keyring
	// Signed is true when the mesh signs and verifies its records (it has
	// a CA): then only controller-capable agents write policies, and
	// others pass policy writes to one.
	Signed bool
	// LoopbackMesh is true when this agent's gossip is bound to loopback:
	// every agent of the mesh is on this host, so policy writes other
	// agents pass here need no token where the API has none.
	LoopbackMesh bool
	// Anonymous are the paths that answer without a token. Default
	// DefaultAnonymous (/v1/health, /metrics).
	Anonymous []string
	// SpoolDir receives uploads before they are published (on the store's
	// file system).
	SpoolDir string
	// Addr returns the address the API listens on; New reads it once.
	Addr func() string
	// AllowedHosts are the further host names (or IP addresses) that
	// requests may name in their Host header: a DNS name the API is
	// reached by, or the advertised API address. Ports are ignored.
	// Without them the API answers only to localhost, loopback IPs and
	// the address it is bound to (every IP address when bound to all
	// interfaces), and refuses other names with 421, since a web page
	// can point a name it controls at this host (DNS rebinding).
	AllowedHosts []string
	Logger       *slog.Logger
}

// Server is the HTTP API. Safe for concurrent use.
type Server struct {
	cfg Config
	// tokens are the tokens in force: cfg.Tokens until SetTokens.
	tokens     atomic.Pointer[[]Token]
	log        *slog.Logger
	handler    http.Handler
	onLoopback bool // the API listens on loopback only
	hosts      hostPolicy
	// refused counts the requests guard refuses, by reason.
	refused *prometheus.CounterVec

	// decodeSeen holds the catalog decode errors logged already.
	decodeMu   sync.Mutex
	decodeSeen map[string]bool
}

// New builds the API's routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Anonymous == nil {
		cfg.Anonymous = DefaultAnonymous
	}
	s := &Server{cfg: cfg, log: cfg.Logger, decodeSeen: map[string]bool{}, onLoopback: onLoopback(cfg.Addr),
		hosts: newHostPolicy(cfg.Addr, cfg.AllowedHosts), refused: newRefusedCounter(cfg.Registerer)}
	s.handler = s.routes()
	return s
}

// Handler is the API's handler: every route behind the Host and browser
// checks (see guard) and the token checks.
func (s *Server) Handler() http.Handler { return s.handler }

// decodeErrors logs each catalog record that does not decode, once per
// record version (the catalog counts them in a metric).
func (s *Server) decodeErrors(err error) {
	if err == nil {
		return
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	s.decodeMu.Lock()
	defer s.decodeMu.Unlock()
	for _, e := range errs {
		if msg := e.Error(); !s.decodeSeen[msg] {
			s.decodeSeen[msg] = true
			s.log.Warn("ignoring an unreadable catalog record", "err", msg)
		}
	}
}

// policies returns every applied policy that decodes.
func (s *Server) policies() []catalog.Policy {
	out, err := s.cfg.Catalog.Policies.Values()
	s.decodeErrors(err)
	return out
}

// placements returns every placement record, by key.
func (s *Server) placements() map[string]catalog.Placement {
	out, err := s.cfg.Catalog.Placements.Map()
	s.decodeErrors(err)
	return out
}

// jobs returns every job record, newest first.
func (s *Server) jobs() []catalog.Job {
	out, err := s.cfg.Catalog.Jobs.Values()
	s.decodeErrors(err)
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Created.Equal(out[k].Created) {
			return out[i].Created.After(out[k].Created)
		}
		return out[i].Name < out[k].Name
	})
	return out
}

// job returns one job's record.
func (s *Server) job(name string) (catalog.Job, error) { return s.cfg.Catalog.Jobs.Value(name) }

// driftRecords returns every node's drift records, by policy then node.
func (s *Server) driftRecords() []catalog.Drift {
	out, err := s.cfg.Catalog.Drift.Values()
	s.decodeErrors(err)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Policy != out[j].Policy {
			return out[i].Policy < out[j].Policy
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// artifactsList returns every manifest of kind with its holders.
func (s *Server) artifactsList(kind storage.Kind) []artifacts.Info {
	out, err := s.cfg.Artifacts.List(kind)
	s.decodeErrors(err)
	return out
}

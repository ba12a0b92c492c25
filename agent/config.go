package agent

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/internal/controller"
	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// Config is an agent's configuration: a YAML file, overridden by flags. The
// zero value of each field is its documented default; a Config is not
// changed after New.
type Config struct {
	// Name is the node's unique name. Default: the host name.
	Name string `yaml:"name"`
	// DataDir holds the identity key, the pebble database and artifacts.
	// Default "/var/lib/strata".
	DataDir string `yaml:"data_dir"`
	// Tier is edge, onprem or cloud. Default edge.
	Tier string `yaml:"tier"`
	// Site is the node's site. Default "default".
	Site string `yaml:"site"`
	// Region groups sites. Default "default".
	Region string `yaml:"region"`
	// Labels are free-form key=value labels.
	Labels map[string]string `yaml:"labels"`
	// Bind is the gossip address, UDP and TCP. Default "0.0.0.0:7946".
	Bind string `yaml:"bind"`
	// Advertise is the gossip address peers use. Default: Bind's host when
	// it names one; bound to every interface, the local address of the
	// route to the first join peer; with no join peer, memberlist's pick
	// of a private address.
	Advertise string `yaml:"advertise"`
	// AdvertiseAPI is the API address this agent advertises in its node
	// document (the CLI and dashboard show it; peers forward requests over
	// the data plane, not to it). Default: API when it names a routable host; bound to
	// every interface, the gossip address's host with API's port; a
	// loopback API is not advertised to peers on other hosts.
	AdvertiseAPI string `yaml:"advertise_api"`
	// AdvertiseData is the data plane address peers use. Default: as for
	// AdvertiseAPI, from DataAddr.
	AdvertiseData string `yaml:"advertise_data"`
	// Join lists gossip addresses to join at start, retried with backoff.
	// With federation on, list only agents of this site: each site is its
	// own pool.
	Join []string `yaml:"join"`
	// Federation joins this site to other sites over libp2p; off unless
	// Listen is set (see docs/networking.md).
	Federation FederationConfig `yaml:"federation"`
	// API is the HTTP API address. Default "127.0.0.1:7470".
	API string `yaml:"api"`
	// GossipKey is the base64 gossip encryption key (`strata keygen`).
	// Empty: gossip is not encrypted.
	GossipKey string `yaml:"gossip_key"`
	// GossipKeyFile holds the gossip key (read at start; keeps the key out
	// of `ps` and of the config). $STRATA_GOSSIP_KEY works too.
	GossipKeyFile string `yaml:"gossip_key_file"`
	// APIToken is a token with every scope (read, infer, write): with it
	// (or ACLTokens) set, API calls need "Authorization: Bearer TOKEN".
	// Without tokens a loopback-bound API answers everything and one bound
	// off loopback only APIAnonymous. $STRATA_API_TOKEN works too.
	APIToken string `yaml:"api_token"`
	// APITokenFile holds APIToken (read at start).
	APITokenFile string `yaml:"api_token_file"`
	// ACLTokens are further tokens, kept as their SHA-256 (`strata token
	// hash`), each with its scopes: read, infer, write.
	ACLTokens []ACLToken `yaml:"acl_tokens"`
	// APIAnonymous are the API paths that answer without a token. Default
	// ["/v1/health", "/metrics"].
	APIAnonymous []string `yaml:"api_anonymous"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is logfmt (key=value lines) or json (one JSON object a
	// line, for log shippers). Default logfmt. Ignored when Logger is set.
	LogFormat string `yaml:"log_format"`
	// GPUs declares GPUs where NVML cannot see them. Declared GPUs are used
	// only when NVML finds none.
	GPUs []DeclaredGPU `yaml:"gpus"`
	// RDMA declares RDMA ports where /sys/class/infiniband has none.
	RDMA []DeclaredRDMA `yaml:"rdma"`
	// Fabric declares the RDMA fabric ID; it overrides the discovered one.
	Fabric string `yaml:"fabric"`
	// NVMLLibrary is the path of libnvidia-ml.so.1. Default: the system's.
	NVMLLibrary string `yaml:"nvml_library"`
	// DisableNVML skips GPU discovery through NVML.
	DisableNVML bool `yaml:"disable_nvml"`
	// Controller says whether this agent may own policies (place and
	// reconcile them). Default: true on onprem and cloud, false on edge.
	Controller *bool `yaml:"controller"`
	// DataAddr is the data plane's UDP address (QUIC with mutual TLS):
	// artifact transfers and forwarded inference. Default "0.0.0.0:7471".
	DataAddr string `yaml:"data_addr"`
	// CACertFile is the mesh CA certificate (PEM) from `strata keygen -pki`.
	// Without it the agent has no data plane: artifact calls say so.
	CACertFile string `yaml:"ca_cert"`
	// CAKeyFile lets the agent issue its own node certificate at first
	// start; NodeCertFile is one issued to this node's identity key instead.
	CAKeyFile    string `yaml:"ca_key"`
	NodeCertFile string `yaml:"node_cert"`
	// Bootstrap is the API URL of an agent that holds the CA key: at
	// first start, an agent with ca_cert but neither node_cert nor ca_key
	// asks it for a node certificate, presenting BootstrapToken (a token
	// with scope cert there), so ca_key stays on a few hosts.
	Bootstrap string `yaml:"bootstrap"`
	// BootstrapToken is that token; BootstrapTokenFile holds it, or
	// $STRATA_BOOTSTRAP_TOKEN (read at first start only).
	BootstrapToken     string `yaml:"bootstrap_token"`
	BootstrapTokenFile string `yaml:"bootstrap_token_file"`
	// AcceptUnsigned takes unsigned gossip (node documents and catalog
	// records) from agents of a version before signed gossip, during a
	// rolling upgrade. Any member holding the gossip key can then write
	// anything: turn it off once every agent is upgraded
	// (docs/security.md, "Upgrading to signed gossip").
	AcceptUnsigned bool `yaml:"accept_unsigned_gossip"`
	// GossipCompression compresses gossip. Off by default: within a
	// site's pool, bandwidth is cheap and the agent shares its host's
	// CPU. Turn it on for one pool whose members are far apart on slow
	// links (mesh.Config.Compress).
	GossipCompression bool `yaml:"gossip_compression"`
	// Insecure lets an agent bound off loopback run without a gossip key
	// or a mesh CA: any host that reaches its gossip port can then join
	// the mesh and write to it. For throwaway test networks only.
	Insecure bool `yaml:"insecure"`
	// SigningKeyFile is the ed25519 key (PEM) this agent signs published
	// artifacts with; without it `strata push` is refused here.
	SigningKeyFile string `yaml:"signing_key"`
	// TrustedKeysFile lists the public keys (PEM) trusted to sign manifests.
	// Default: the signing key's public half.
	TrustedKeysFile string `yaml:"trusted_keys"`
	// IngressLimit and EgressLimit cap the data plane's bytes per second
	// ("100MB" per second); zero means no cap.
	IngressLimit ByteSize `yaml:"ingress_limit"`
	EgressLimit  ByteSize `yaml:"egress_limit"`
	// MaxConcurrentPulls bounds the transfers running at once. Default 4.
	MaxConcurrentPulls int `yaml:"max_concurrent_pulls"`
	// PrestageBudget bounds the bytes of models this node pulls ahead of
	// any failure as a replica's standby (InferenceService prestage).
	// Default 8GiB.
	PrestageBudget ByteSize `yaml:"prestage_budget"`
	// ORTLibrary is the ONNX Runtime shared library. Default:
	// $STRATA_ORT_LIB, else the first found of infer.LibraryCandidates
	// (beside the binary, ../lib/strata, .deps/onnxruntime, /usr/lib/strata,
	// the system's). Without it the agent serves no models: /v2 says how to
	// install it.
	ORTLibrary string `yaml:"ort_library"`
	// SampleFraction is the fraction of inference requests whose inputs and
	// outputs are kept for drift detection. Default 0.1.
	SampleFraction float64 `yaml:"sample_fraction"`
	// SpillInflight is how many requests of one model version may be in
	// flight on this agent before a new one is offered to another replica
	// first (infer.Config.SpillInflight). Default 64; negative: never.
	SpillInflight int `yaml:"spill_inflight"`
	// MaxConnections caps the API's open connections: a new one closes
	// the connection idle longest, or waits until one closes or goes
	// idle. Default 1024.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerClient caps one client's open API connections (an
	// IPv4 address, an IPv6 /64, or all of loopback): a new one closes
	// that client's idle connection, or is closed at once when all are
	// busy. Default 64; raise it for a local proxy that keeps more
	// requests in flight.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	// APIAllowedHosts are further host names (or addresses) the API
	// answers to in a request's Host header, such as a DNS name clients
	// reach it by. Always allowed: localhost, loopback IPs, the API's
	// bound address (every IP address when bound to all interfaces) and
	// advertise_api's host. Other names are refused (DNS rebinding).
	APIAllowedHosts []string `yaml:"api_allowed_hosts"`
	// LoadInterval is how often GPUs are re-read through NVML and the load
	// republished when it changed. Default 10s.
	LoadInterval time.Duration `yaml:"load_interval"`
	// SiteLostAfter is how long a site may answer nothing before this
	// agent, as a controller, places again elsewhere its inference
	// replicas there that serve clients in other sites (a site cut off
	// and a site whose nodes all died look the same). Default 5m.
	SiteLostAfter time.Duration `yaml:"site_lost_after"`

	// Build is the agent's version as `strata version` prints it,
	// gossiped so that members show who runs what during an upgrade.
	Build string `yaml:"-"`

	// Hooks; nil means production. Not settable from YAML.

	// Logger receives the agent's logs. Default: LogFormat to stderr at
	// LogLevel.
	Logger *slog.Logger `yaml:"-"`
	// Registry receives metrics. Default: a registry of the agent's own,
	// served on /metrics.
	Registry *prometheus.Registry `yaml:"-"`
	// MeshTimings adjusts memberlist's timings (tests, the dev mesh).
	MeshTimings func(*memberlist.Config) `yaml:"-"`
	// PKI holds key material as PEM, overriding the *File settings (the dev
	// mesh makes its own).
	PKI PKI `yaml:"-"`
	// GossipTransport carries gossip instead of real sockets (tests: an
	// in-memory network); nil means UDP and TCP on Bind.
	GossipTransport memberlist.Transport `yaml:"-"`
	// PacketDelay emulates WAN latency on outgoing gossip (the dev mesh);
	// see mesh.Config.PacketDelay.
	PacketDelay func(toAddr string) time.Duration `yaml:"-"`
	// ProcRoot and SysRoot are where host discovery reads. Default "/proc"
	// and "/sys".
	ProcRoot string `yaml:"-"`
	SysRoot  string `yaml:"-"`

	// without names components whose loops do not run (tests: an agent
	// that plays an attacker runs no model loader to correct what it
	// claims).
	without []string
}

// ACLToken is one API token, kept as its SHA-256.
type ACLToken struct {
	// Name says whose token it is (logs, errors).
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the token (`strata token hash`).
	SHA256 string `yaml:"sha256"`
	// Scopes are any of read, infer, write.
	Scopes []string `yaml:"scopes"`
}

// apiTokens turns the configured tokens into the API's.
func (c *Config) apiTokens() ([]httpapi.Token, error) {
	var out []httpapi.Token
	if c.APIToken != "" {
		sum, _ := httpapi.ParseTokenHash(httpapi.HashToken(c.APIToken))
		out = append(out, httpapi.Token{Name: "api_token", SHA256: sum, Scopes: httpapi.Scopes})
	}
	var errs []error
	for i, t := range c.ACLTokens {
		sum, err := httpapi.ParseTokenHash(t.SHA256)
		if err != nil {
			errs = append(errs, fmt.Errorf("acl_tokens[%d].sha256: %w", i, err))
		}
		tok := httpapi.Token{Name: cmp.Or(t.Name, fmt.Sprintf("acl_tokens[%d]", i)), SHA256: sum}
		if len(t.Scopes) == 0 {
			errs = append(errs, fmt.Errorf("acl_tokens[%d].scopes: list at least one of read, infer, write, cert", i))
		}
		for _, s := range t.Scopes {
			if !slices.Contains(httpapi.Scopes, httpapi.Scope(s)) {
				errs = append(errs, fmt.Errorf("acl_tokens[%d].scopes: %q is not a scope: use read, infer, write or cert", i, s))
			}
			tok.Scopes = append(tok.Scopes, httpapi.Scope(s))
		}
		out = append(out, tok)
	}
	return out, errors.Join(errs...)
}

// loadSecrets reads the secrets kept in files or the environment, so they
// need not appear in flags that `ps` shows.
func (c *Config) loadSecrets() error {
	read := func(dst *string, path, field string) error {
		if path == "" || *dst != "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		*dst = strings.TrimSpace(string(b))
		return nil
	}
	if c.GossipKey == "" {
		c.GossipKey = os.Getenv("STRATA_GOSSIP_KEY")
	}
	if c.APIToken == "" {
		c.APIToken = os.Getenv("STRATA_API_TOKEN")
	}
	return errors.Join(read(&c.GossipKey, c.GossipKeyFile, "gossip_key_file"), read(&c.APIToken, c.APITokenFile, "api_token_file"))
}

// DeclaredGPU declares Count identical GPUs.
type DeclaredGPU struct {
	// Model is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Model string `yaml:"model"`
	// Memory is the memory of one GPU, e.g. "80GiB".
	Memory ByteSize `yaml:"memory"`
	// Count is how many. Default 1.
	Count int `yaml:"count"`
}

// DeclaredRDMA declares one RDMA port.
type DeclaredRDMA struct {
	Device    string `yaml:"device"`
	Port      int    `yaml:"port"`
	LinkLayer string `yaml:"link_layer"`
	Rate      string `yaml:"rate"`
	Fabric    string `yaml:"fabric"`
}

// ByteSize is a byte count written as people do ("80GiB", "512Mi").
type ByteSize int64

// UnmarshalYAML parses a byte size.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := policy.ParseBytes(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = ByteSize(v)
	return nil
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "strata"
	}
	return Config{
		Name:          host,
		DataDir:       "/var/lib/strata",
		Tier:          mesh.TierEdge,
		Site:          "default",
		Region:        "default",
		Bind:          "0.0.0.0:7946",
		API:           "127.0.0.1:7470",
		DataAddr:      "0.0.0.0:7471",
		LogLevel:      "info",
		LogFormat:     LogFormatLogfmt,
		LoadInterval:  10 * time.Second,
		SiteLostAfter: controller.DefaultSiteLostAfter,
		ProcRoot:      "/proc",
		SysRoot:       "/sys",
	}
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	set := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	set(&c.Name, d.Name)
	set(&c.DataDir, d.DataDir)
	set(&c.Tier, d.Tier)
	set(&c.Site, d.Site)
	set(&c.Region, d.Region)
	set(&c.Bind, d.Bind)
	set(&c.API, d.API)
	set(&c.DataAddr, d.DataAddr)
	set(&c.LogLevel, d.LogLevel)
	set(&c.LogFormat, d.LogFormat)
	set(&c.ProcRoot, d.ProcRoot)
	set(&c.SysRoot, d.SysRoot)
	if c.LoadInterval == 0 {
		c.LoadInterval = d.LoadInterval
	}
	if c.SiteLostAfter == 0 {
		c.SiteLostAfter = d.SiteLostAfter
	}
	if c.SampleFraction == 0 {
		c.SampleFraction = 0.1
	}
	if c.SpillInflight == 0 {
		c.SpillInflight = 64
	}
	if c.PrestageBudget == 0 {
		c.PrestageBudget = serving.DefaultPrestageBudget
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = httpapi.DefaultMaxConns
	}
	if c.MaxConnectionsPerClient == 0 {
		c.MaxConnectionsPerClient = httpapi.DefaultMaxConnsPerClient
	}
	for i := range c.GPUs {
		if c.GPUs[i].Count == 0 {
			c.GPUs[i].Count = 1
		}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
}

// Validate reports every problem at once, each naming its setting.
// FederationConfig is the agent's part in joining sites over libp2p.
type FederationConfig struct {
	// Listen are the libp2p multiaddrs a gateway listens at, such as
	// /ip4/0.0.0.0/tcp/7950. Setting it turns federation on.
	Listen []string `yaml:"listen"`
	// Peers are agents of other sites to dial first
	// (/ip4/HOST/tcp/PORT/p2p/PEER-ID, as `strata members -o json` shows in
	// addrs.federation); later ones are learned from summaries.
	Peers []string `yaml:"peers"`
	// Gateways is how many agents of the site carry its federation
	// traffic (default 2).
	Gateways int `yaml:"gateways"`
	// Reachability is whether agents of other sites can dial this one's
	// federation address: auto (AutoNAT finds out; default), public (a
	// relay for agents behind NATs) or private (behind a NAT: reached
	// through a relay slot on its peers).
	Reachability string `yaml:"reachability"`
}

// Enabled reports whether federation is on.
func (f FederationConfig) Enabled() bool { return len(f.Listen) > 0 }

func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("name", "must not be empty")
	}
	if !mesh.ValidTier(c.Tier) {
		bad("tier", "%q is not a tier: use edge, onprem or cloud", c.Tier)
	}
	for i, a := range c.Federation.Listen {
		if _, err := multiaddr.NewMultiaddr(a); err != nil {
			bad(fmt.Sprintf("federation.listen[%d]", i), "%q is not a multiaddr (%v): use /ip4/0.0.0.0/tcp/7950", a, err)
		}
	}
	for i, p := range c.Federation.Peers {
		if _, err := peer.AddrInfoFromString(p); err != nil {
			bad(fmt.Sprintf("federation.peers[%d]", i), "%q is not a peer address (%v): use /ip4/HOST/tcp/PORT/p2p/PEER-ID", p, err)
		}
	}
	if len(c.Federation.Peers) > 0 && !c.Federation.Enabled() {
		bad("federation.peers", "set federation.listen too: federation is off without it")
	}
	switch c.Federation.Reachability {
	case "", "auto", "public":
	case "private":
		if len(c.Federation.Peers) == 0 {
			bad("federation.reachability", "private needs federation.peers: an agent behind a NAT is reached through a relay slot on one of them")
		}
	default:
		bad("federation.reachability", "%q: use auto, public or private", c.Federation.Reachability)
	}
	if c.Federation.Gateways < 0 {
		bad("federation.gateways", "%d: must be 1 or more (default 2)", c.Federation.Gateways)
	}
	if c.Bootstrap != "" {
		if u, err := url.Parse(c.Bootstrap); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("bootstrap", "%q is not an API URL: use http://HOST:PORT of an agent that holds ca_key", c.Bootstrap)
		}
		if c.CACertFile == "" {
			bad("bootstrap", "needs ca_cert: the certificate the agent gets back is checked against it")
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log_level", "%v", err)
	}
	if _, err := NewLogger(io.Discard, c.LogFormat, nil); err != nil {
		bad("log_format", "%v", err)
	}
	if !c.Insecure && !loopbackBind(c.Bind) {
		hasKey := c.GossipKey != "" || c.GossipKeyFile != "" || os.Getenv("STRATA_GOSSIP_KEY") != ""
		hasCA := c.CACertFile != "" || len(c.PKI.CACert) > 0
		if !hasKey || !hasCA {
			var missing []string
			if !hasKey {
				missing = append(missing, "gossip_key (or gossip_key_file)")
			}
			if !hasCA {
				missing = append(missing, "ca_cert")
			}
			bad("bind", "%s is off loopback and %s unset: any host that reaches it could join the mesh and write to it. Run `strata keygen -pki DIR` on one host, then give every agent gossip_key and ca_cert, with ca_key or bootstrap (see docs/security.md); or set insecure: true on a throwaway test network", c.Bind, strings.Join(missing, " and "))
		}
	}
	if c.GossipKey != "" {
		if _, err := mesh.DecodeGossipKey(c.GossipKey); err != nil {
			bad("gossip_key", "%v", strings.TrimPrefix(err.Error(), "mesh: "))
		}
	}
	for _, a := range []struct{ field, v string }{{"bind", c.Bind}, {"api", c.API}, {"advertise", c.Advertise}, {"data_addr", c.DataAddr}, {"advertise_api", c.AdvertiseAPI}, {"advertise_data", c.AdvertiseData}} {
		if a.v == "" {
			continue
		}
		if !strings.Contains(a.v, ":") {
			bad(a.field, "%q must be HOST:PORT", a.v)
		}
	}
	for _, a := range []struct{ field, v string }{{"advertise", c.Advertise}, {"advertise_api", c.AdvertiseAPI}, {"advertise_data", c.AdvertiseData}} {
		if h, _, err := net.SplitHostPort(a.v); err == nil && (h == "" || net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified()) {
			bad(a.field, "%q cannot be dialled: give the address peers reach this host at (-%s)", a.v, strings.ReplaceAll(a.field, "_", "-"))
		}
	}
	for i, g := range c.GPUs {
		if g.Model == "" {
			bad(fmt.Sprintf("gpus[%d].model", i), "must not be empty")
		}
		if g.Count < 0 {
			bad(fmt.Sprintf("gpus[%d].count", i), "must not be negative")
		}
	}
	if c.MaxConnections < 0 {
		bad("max_connections", "must not be negative")
	}
	if c.MaxConnectionsPerClient < 0 {
		bad("max_connections_per_client", "must not be negative")
	}
	for _, h := range c.APIAllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			bad("api_allowed_hosts", "%q: want a host name or address, as clients put it in the URL (node1.example.com)", h)
		}
	}
	for k := range c.Labels {
		if k == "" || strings.ContainsAny(k, "= ") {
			bad("labels", "bad label key %q", k)
		}
	}
	if _, err := c.apiTokens(); err != nil {
		errs = append(errs, err)
	}
	if c.SampleFraction < 0 || c.SampleFraction > 1 {
		bad("sample_fraction", "must be between 0 and 1")
	}
	if c.LoadInterval < 0 {
		bad("load_interval", "must not be negative")
	}
	if c.SiteLostAfter < 0 {
		bad("site_lost_after", "must not be negative")
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not a level: use debug, info, warn or error", s)
	}
	return l, nil
}

var (
	yamlUnknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)
	yamlLine         = regexp.MustCompile(`line (\d+): (.*)`)
)

// ParseConfig reads a YAML configuration strictly: an unknown key or a value
// of the wrong type is an error that names the file, line and key.
func ParseConfig(name string, data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, configError(name, err)
	}
	return c, nil
}

func configError(name string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			return fmt.Errorf("%s:%s: %s", name, m[1], m[2])
		}
		return fmt.Errorf("%s: %s", name, msg)
	}
	var errs []error
	for _, e := range te.Errors {
		if m := yamlUnknownField.FindStringSubmatch(e); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: unknown key %q (see `strata agent -h` for the settings)", name, m[1], m[2]))
			continue
		}
		if m := yamlLine.FindStringSubmatch(e); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", name, m[1], m[2]))
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %s", name, e))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the YAML file at path.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(path, b)
}

// Flags binds the agent's command-line flags to fs. After fs.Parse, call
// the returned function: it loads -config (when given), applies the flags
// that were set on top of it, and returns the result.
func Flags(fs *flag.FlagSet) func() (Config, error) {
	var path string
	var sets []func(*Config) error
	str := func(name, usage string, set func(*Config, string)) {
		fs.Func(name, usage, func(v string) error {
			sets = append(sets, func(c *Config) error { set(c, v); return nil })
			return nil
		})
	}
	fs.StringVar(&path, "config", "", "YAML configuration `file`; flags override it")
	str("name", "node name, unique in the mesh (default: the host name)", func(c *Config, v string) { c.Name = v })
	str("data-dir", "data `directory`: identity key, database, artifacts (default /var/lib/strata)", func(c *Config, v string) { c.DataDir = v })
	str("tier", "node tier: edge, onprem or cloud (default edge)", func(c *Config, v string) { c.Tier = v })
	str("site", "site name (default \"default\")", func(c *Config, v string) { c.Site = v })
	str("region", "region name (default \"default\")", func(c *Config, v string) { c.Region = v })
	fs.Func("label", "node label `k=v` (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("label %q must be k=v", v)
		}
		sets = append(sets, func(c *Config) error {
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			c.Labels[k] = val
			return nil
		})
		return nil
	})
	str("bind", "gossip `HOST:PORT`, UDP and TCP (default 0.0.0.0:7946)", func(c *Config, v string) { c.Bind = v })
	str("advertise", "gossip `HOST:PORT` peers should use (default: -bind's host; bound to all interfaces, the address of the route to the first -join peer)", func(c *Config, v string) { c.Advertise = v })
	str("advertise-api", "API `HOST:PORT` advertised in the node document (default: from -api, or the gossip address's host when -api is bound to all interfaces)", func(c *Config, v string) { c.AdvertiseAPI = v })
	str("advertise-data", "data plane `HOST:PORT` peers should use (default: from -data-addr, as for -advertise-api)", func(c *Config, v string) { c.AdvertiseData = v })
	fs.Func("federation-listen", "libp2p `multiaddr` to listen at as a federation gateway, such as /ip4/0.0.0.0/tcp/7950 (repeatable; turns federation on: each site its own pool)", func(v string) error {
		sets = append(sets, func(c *Config) error { c.Federation.Listen = append(c.Federation.Listen, v); return nil })
		return nil
	})
	fs.Func("federation-peer", "libp2p `multiaddr` of an agent in another site, ending in /p2p/PEER-ID (repeatable)", func(v string) error {
		sets = append(sets, func(c *Config) error { c.Federation.Peers = append(c.Federation.Peers, v); return nil })
		return nil
	})
	str("federation-reachability", "whether other sites can dial this agent's federation address: `auto` (AutoNAT decides), public (relay for agents behind NATs) or private (behind a NAT; reached through a relay on its -federation-peer agents)", func(c *Config, v string) { c.Federation.Reachability = v })
	fs.Func("join", "gossip `HOST:PORT` of a peer to join (repeatable; retried with backoff until reachable)", func(v string) error {
		sets = append(sets, func(c *Config) error { c.Join = append(c.Join, v); return nil })
		return nil
	})
	str("api", "HTTP API `HOST:PORT` (default 127.0.0.1:7470)", func(c *Config, v string) { c.API = v })
	str("gossip-key", "base64 gossip encryption `key` from `strata keygen` (default: unencrypted)", func(c *Config, v string) { c.GossipKey = v })
	str("gossip-key-file", "`file` holding the gossip key (or set $STRATA_GOSSIP_KEY)", func(c *Config, v string) { c.GossipKeyFile = v })
	str("api-token", "API `token` with every scope; then calls need Authorization: Bearer (default: none; a loopback API answers everything)", func(c *Config, v string) { c.APIToken = v })
	str("api-token-file", "`file` holding the API token (or set $STRATA_API_TOKEN)", func(c *Config, v string) { c.APIToken = ""; c.APITokenFile = v })
	str("log-level", "log `level`: debug, info, warn, error (default info)", func(c *Config, v string) { c.LogLevel = v })
	str("log-format", "log `format`: logfmt or json (default logfmt)", func(c *Config, v string) { c.LogFormat = v })
	str("data-addr", "data plane `HOST:PORT` (UDP, QUIC; default 0.0.0.0:7471)", func(c *Config, v string) { c.DataAddr = v })
	str("ca-cert", "mesh CA certificate `file` (PEM) from `strata keygen -pki`", func(c *Config, v string) { c.CACertFile = v })
	str("ca-key", "mesh CA key `file`: the agent issues its own certificate", func(c *Config, v string) { c.CAKeyFile = v })
	str("node-cert", "this node's certificate `file`, issued by the mesh CA to its identity key", func(c *Config, v string) { c.NodeCertFile = v })
	str("bootstrap", "API `URL` of an agent holding ca_key, asked for this node's certificate at first start (with -bootstrap-token-file)", func(c *Config, v string) { c.Bootstrap = v })
	str("bootstrap-token-file", "`file` holding a token with scope cert on the -bootstrap agent", func(c *Config, v string) { c.BootstrapTokenFile = v })
	str("signing-key", "artifact signing key `file` (PEM); needed to push", func(c *Config, v string) { c.SigningKeyFile = v })
	str("trusted-keys", "`file` of public keys (PEM) trusted to sign artifacts (default: the signing key's)", func(c *Config, v string) { c.TrustedKeysFile = v })
	str("ort-library", "ONNX Runtime shared library `path` (default $STRATA_ORT_LIB, else found beside the binary, in ../lib/strata, .deps/onnxruntime or /usr/lib/strata)", func(c *Config, v string) { c.ORTLibrary = v })
	fs.Func("spill-inflight", "requests of one model version in flight here at which a new one is offered to another replica first (default 64; negative: never)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.SpillInflight = n; return nil })
		return nil
	})
	fs.Func("site-lost-after", "`duration` a site may answer nothing before its inference replicas that serve clients elsewhere are placed again (default 5m)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 5m, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.SiteLostAfter = d; return nil })
		return nil
	})
	str("fabric", "declared RDMA fabric `ID` (overrides discovery)", func(c *Config, v string) { c.Fabric = v })
	str("nvml-library", "`path` of libnvidia-ml.so.1 (default: the system's)", func(c *Config, v string) { c.NVMLLibrary = v })
	fs.Func("controller", "`true|false`: may this agent own policies (place and reconcile them)? (default: true on onprem and cloud, false on edge; with a mesh CA only controllers write policies, and a mesh with none cannot take any)", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.Controller = &b; return nil })
		return nil
	})
	fs.BoolFunc("accept-unsigned-gossip", "take unsigned gossip from agents before signed gossip, while upgrading a mesh (docs/security.md)", func(v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.AcceptUnsigned = on; return nil })
		return nil
	})
	fs.BoolFunc("gossip-compression", "compress gossip: for one pool over slow links (default false)", func(v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.GossipCompression = on; return nil })
		return nil
	})
	fs.BoolFunc("insecure", "allow a gossip bind off loopback without gossip key or mesh CA (test networks only)", func(v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.Insecure = on; return nil })
		return nil
	})
	fs.BoolFunc("disable-nvml", "skip GPU discovery through NVML", func(v string) error {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		sets = append(sets, func(c *Config) error { c.DisableNVML = off; return nil })
		return nil
	})
	return func() (Config, error) {
		var c Config
		if path != "" {
			var err error
			if c, err = LoadConfig(path); err != nil {
				return Config{}, err
			}
		}
		for _, set := range sets {
			if err := set(&c); err != nil {
				return Config{}, err
			}
		}
		c.EnsureDefaults()
		return c, c.Validate()
	}
}

// loopbackBind says whether a gossip bind address (host:port; empty is
// the default, 0.0.0.0) is on loopback.
func loopbackBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// controller says whether the agent may own policies: Controller when
// set, else every tier but edge.
func (c *Config) controller() bool {
	if c.Controller != nil {
		return *c.Controller
	}
	return c.Tier != mesh.TierEdge
}

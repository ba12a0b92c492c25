package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/controller"
	"github.com/strata-mesh/strata/internal/driftwatch"
	"github.com/strata-mesh/strata/internal/events"
	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/internal/jobs"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/internal/serving"
	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/agent/discover"
	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/federation"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/storage"
)

// Store keys owned by the agent.
const (
	keyIdentity          = "agent/identity"
	keyConfigFingerprint = "agent/config-fingerprint"
)

// Agent is one running strata daemon.
type Agent struct {
	cfg Config
	// fed joins the site to other sites; nil where federation is off.
	fed *federation.Federation
	log *slog.Logger
	// level is the log level a reload can change (nil when the caller
	// gave the logger).
	level *slog.LevelVar
	api   *httpapi.Server
	// issueCert issues node certificates to bootstrapping agents; nil
	// without the CA key.
	issueCert func(api.CertRequest) ([]byte, error)
	// reloadMu orders reloads; reloads counts them by result.
	reloadMu sync.Mutex
	reloads  *prometheus.CounterVec
	db       *storage.DB
	id       mesh.Identity
	mesh     *mesh.Mesh
	// cat is the mesh's shared state as typed tables.
	cat     *catalog.Catalog
	reg     *prometheus.Registry
	ln      net.Listener
	srv     *http.Server
	started time.Time
	// apiAddr is the API address peers are told (empty: loopback only);
	// gossipKey the decoded gossip key (nil: unencrypted).
	apiAddr   string
	gossipKey []byte

	dp     *dataPlane // nil without a mesh CA
	art    *artifacts.Service
	inf    *infer.Server
	infErr error // why inf is nil
	srvg   *serving.Loader
	fwd    *serving.Forwarder
	ctrl   *controller.Controller
	drift  *driftwatch.Watch
	// jobRunner runs the training jobs placed here; events derives the
	// /v1/events stream.
	jobRunner *jobs.Runner
	events    *events.Stream
	// guard recovers the panics of the components' background work.
	guard *safe.Guard

	// peer answers requests other agents send over the data plane.
	peer atomic.Pointer[http.Handler]

	// lock holds the data dir (flock on its agent.pid) until Close.
	lock *os.File
	// base is every API request's context: ending it at shutdown ends
	// long requests (event streams) at once.
	base       context.Context
	cancelBase context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// New opens the data dir (creating the identity at first start), discovers
// the host, binds the API and gossip ports and starts the mesh node. It does
// not join peers or serve the API until Run.
func New(cfg Config) (*Agent, error) {
	cfg.EnsureDefaults()
	if err := cfg.loadSecrets(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, started: time.Now()}
	a.initTelemetry()
	if err := a.openState(); err != nil {
		return nil, err
	}
	// From here on a failure closes what was opened.
	steps := []func() error{a.openNode, a.joinMesh, a.startComponents, a.startControl, a.startAPI}
	for _, step := range steps {
		if err := step(); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// initTelemetry sets up the agent's logger and metrics registry: the
// configured ones, or its own.
func (a *Agent) initTelemetry() {
	cfg := a.cfg
	a.log = cfg.Logger
	if a.log == nil {
		lvl, _ := parseLevel(cfg.LogLevel)
		a.level = new(slog.LevelVar)
		a.level.Set(lvl)
		a.log, _ = NewLogger(os.Stderr, cfg.LogFormat, a.level) // validated
	}
	a.log = a.log.With(logKeyAgent, cfg.Name)
	a.reg = cfg.Registry
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
		a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
}

// openState takes the data dir (locked against a second agent) and opens
// its database; on an error it leaves nothing open.
func (a *Agent) openState() error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	lock, err := lockDataDir(a.cfg.DataDir)
	if err != nil {
		return err
	}
	a.lock = lock
	db, err := storage.Open(storage.Options{Dir: filepath.Join(a.cfg.DataDir, "db"), Logger: a.log})
	if err != nil {
		lock.Close()
		return err
	}
	a.db = db
	return nil
}

// openNode loads the node's identity, opens its artifact store and data
// plane, its inference runtime (an agent without one still runs) and its
// API listener.
func (a *Agent) openNode() error {
	var err error
	if a.id, err = loadIdentity(a.db); err != nil {
		return err
	}
	if err := a.checkFingerprint(); err != nil {
		return err
	}
	if a.dp, err = a.openArtifacts(); err != nil {
		return fmt.Errorf("agent: artifacts: %w", err)
	}
	a.inf, a.infErr = a.openInference()
	if a.infErr != nil {
		a.log.Warn("inference disabled", "err", a.infErr)
	}
	if a.ln, err = net.Listen("tcp", a.cfg.API); err != nil {
		return fmt.Errorf("agent: API listen on %s: %w (is another agent running? choose another with -api)", a.cfg.API, err)
	}
	return nil
}

// joinMesh starts the gossip member and publishes the addresses peers
// dial: never 0.0.0.0, and loopback only on a one-host mesh.
func (a *Agent) joinMesh() error {
	cfg := a.cfg
	if cfg.GossipKey != "" {
		a.gossipKey, _ = mesh.DecodeGossipKey(cfg.GossipKey) // validated
	}
	adv, err := gossipAdvertise(context.Background(), cfg.Bind, cfg.Advertise, cfg.Join)
	if err != nil {
		return err
	}
	var trust *mesh.Trust
	var az catalog.Authorizer
	if a.dp != nil {
		az.VerifyManifest = a.dp.store.VerifyManifest
		trust = &mesh.Trust{CA: a.dp.caCert, Cert: a.dp.cert, Authorize: az.Authorize, AcceptUnsigned: cfg.AcceptUnsigned}
	}
	a.mesh, err = mesh.New(mesh.Config{
		Trust:         trust,
		Prefer:        az.Prefer,
		Name:          cfg.Name,
		Identity:      a.id,
		BindAddr:      cfg.Bind,
		AdvertiseAddr: adv,
		GossipKey:     a.gossipKey,
		Local:         a.discover(),
		DB:            a.db,
		Spill:         catalog.Cached,
		Logger:        a.log,
		Registerer:    a.reg,
		Compress:      cfg.GossipCompression,
		Memberlist:    cfg.MeshTimings,
		PacketDelay:   cfg.PacketDelay,
		Transport:     cfg.GossipTransport,
	})
	if err != nil {
		return explainNoAddress(err)
	}
	gossip := a.mesh.GossipAddr()
	a.apiAddr = peerAddr(cfg.AdvertiseAPI, a.ln.Addr().String(), gossip)
	dataAddr := ""
	if a.dp != nil {
		dataAddr = peerAddr(cfg.AdvertiseData, a.dp.node.Addr().String(), gossip)
	}
	if err := a.mesh.Update(func(s *mesh.NodeState) { s.Addrs.API, s.Addrs.Data = a.apiAddr, dataAddr }); err != nil {
		return err
	}
	if a.apiAddr == "" {
		a.log.Info("API is on loopback only: it is not advertised to peers on other hosts (set -api or -advertise-api to change that)", "api", a.ln.Addr().String())
	}
	return nil
}

// startComponents builds what works over the catalog: events, artifacts,
// drift monitors, the model loader and, where configured, federation.
func (a *Agent) startComponents() error {
	cfg := a.cfg
	a.cat = catalog.New(a.mesh, a.reg)
	a.guard = safe.New(safe.Config{Logger: a.log, Registerer: a.reg})
	a.events = events.New(a.cat, a.guard)
	corrupt := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_artifacts_corrupt_total",
		Help: "Held blobs whose bytes did not match their digest (at load or in the start-up scrub); each was quarantined and is pulled again.",
	})
	a.reg.MustRegister(corrupt)
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_config_reloads_total",
		Help: "Configuration reloads (SIGHUP) by result: ok, or error (the running configuration stayed).",
	}, []string{"result"})
	a.reg.MustRegister(a.reloads)
	ac := artifacts.Config{Mesh: a.mesh, Catalog: a.cat, Logger: a.log, Guard: a.guard, OnCorrupt: func(digest string, err error) {
		corrupt.Inc()
		a.events.Publish(Event{Type: "artifact.corrupt", Node: cfg.Name,
			Message: fmt.Sprintf("blob sha256:%.12s on %s does not match its digest: quarantined, to be pulled again from a verified holder", digest, cfg.Name)})
	}}
	if a.dp != nil {
		ac.Store, ac.Node, ac.Signing = a.dp.store, a.dp.node, a.dp.signing
	}
	if cfg.Federation.Enabled() {
		ac.Remote = func(digest string) []dataplane.Holder { return federation.RemoteHolders(a.mesh, digest, time.Now()) }
	}
	a.art = artifacts.New(ac)
	dc := driftwatch.Config{Name: cfg.Name, Site: cfg.Site, Catalog: a.cat, Artifacts: a.art, Logger: a.log, Guard: a.guard, Registerer: a.reg, Publish: a.art.Publish}
	if a.inf != nil {
		dc.Stats = a.inf.Stats
	}
	a.drift = driftwatch.New(dc)
	lc := serving.LoaderConfig{Mesh: a.mesh, Catalog: a.cat, Artifacts: a.art, Logger: a.log, Guard: a.guard, OnLoaded: func(loaded map[string]serving.Model) {
		models := make(map[string]driftwatch.Model, len(loaded))
		for key, m := range loaded {
			models[key] = driftwatch.Model{Name: m.Name, Version: m.Version}
		}
		a.drift.Sync(models)
	}}
	if a.inf != nil {
		lc.Inference = a.inf
	}
	lc.InferenceErr = a.infErr
	lc.PrestageBudget = int64(cfg.PrestageBudget)
	a.srvg = serving.NewLoader(lc)
	if !cfg.Federation.Enabled() {
		return nil
	}
	fc := federation.Config{Mesh: a.mesh, Identity: a.id, Listen: cfg.Federation.Listen, Peers: cfg.Federation.Peers,
		Gateways: cfg.Federation.Gateways, Reachability: federation.Reachability(cfg.Federation.Reachability), PSK: federation.PSKFromGossipKey(a.gossipKey), Logger: a.log.With("component", "federation"), Registerer: a.reg}
	if a.dp != nil {
		fc.Data = a.dp.node
	}
	var err error
	a.fed, err = federation.New(fc)
	return err
}

// handOff is the federation's hand-off of a policy no node of this site
// can take, or nil without federation.
func (a *Agent) handOff() func(PolicyRecord, *placement.Request) (string, string) {
	if a.fed == nil {
		return nil
	}
	return func(_ PolicyRecord, req *placement.Request) (string, string) {
		return federation.HandOff(a.mesh.Local().Site, federation.SiteCoordinate(a.mesh), federation.Remotes(a.mesh, time.Now()), req)
	}
}

// startControl builds the control loops' parts: the controller, the
// inference forwarder and the job runner, with their metrics.
func (a *Agent) startControl() error {
	cfg := a.cfg
	cc := controller.Config{Mesh: a.mesh, Catalog: a.cat, Artifacts: a.art, Logger: a.log, Guard: a.guard, Federated: a.fed != nil, Registerer: a.reg,
		Compile: meshview.Compile, Load: a.loadFrom, HandOff: a.handOff(), SiteLostAfter: cfg.SiteLostAfter}
	if a.fed != nil {
		cc.RemoteSites = func() []mesh.Site { return federation.Sites(a.mesh, time.Now()) }
	}
	a.ctrl = controller.New(cc)
	a.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_placement_snapshot_builds_total",
			Help: "Times the controller indexed the mesh afresh for placement (nodes joined or left, or changed more than their load)."},
			func() float64 { return float64(a.ctrl.SnapshotStats().Builds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_placement_snapshot_updates_total",
			Help: "Times the controller's view of the mesh was updated with new load only, without indexing it again."},
			func() float64 { return float64(a.ctrl.SnapshotStats().Updates) }),
	)
	vouchers := serving.NewVouchers(a.cat)
	fc := serving.ForwarderConfig{Mesh: a.mesh, SLO: serving.NewSLOs(a.cat).For, Vouch: vouchers.Vouch, Declared: vouchers.Declared, Site: a.cfg.Site}
	if a.dp != nil {
		fc.DataPlane = a.dp.node
	}
	if a.fed != nil {
		fc.Remote = func(model, version string) []mesh.Node {
			var out []mesh.Node
			for _, r := range federation.RemoteServers(a.mesh, model, version, time.Now()) {
				n := mesh.Node{NodeState: mesh.NodeState{Name: r.Name, Site: r.Site}, Status: mesh.StatusAlive}
				n.Addrs.Data = r.Data
				out = append(out, n)
			}
			return out
		}
	}
	a.fwd = serving.NewForwarder(fc)
	a.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_forward_unvouched_total",
		Help: "Times a node was passed over as a forward target (once per request that considered it): its document said it serves a model, or holds its standby, that no placement names it for."},
		func() float64 { return float64(a.fwd.Unvouched()) }))
	a.jobRunner = jobs.New(jobs.Config{Name: cfg.Name, DataDir: cfg.DataDir, Mesh: a.mesh, Catalog: a.cat, Artifacts: a.art, Logger: a.log, Guard: a.guard,
		StartQuiet: jobs.DefaultStartQuiet})
	return nil
}

// startAPI builds the HTTP API and its server over the listener, with the
// connection limits.
func (a *Agent) startAPI() error {
	cfg := a.cfg
	tokens, _ := cfg.apiTokens() // validated
	ac := httpapi.Config{
		Mesh: a.mesh, Catalog: a.cat, Artifacts: a.art, Jobs: a.jobRunner, Forwarder: a.fwd, Events: a.events,
		InferenceErr: a.infErr, Registry: a.reg, Registerer: a.reg, Tokens: tokens, Anonymous: cfg.APIAnonymous, Addr: a.APIAddr, Logger: a.log,
		AllowedHosts: allowedHosts(cfg.APIAllowedHosts, a.apiAddr),
		SpoolDir:     filepath.Join(cfg.DataDir, "artifacts"),
		IssueCert:    a.issueCert,
		LoopbackMesh: loopbackBind(a.mesh.GossipAddr()),
		Signed:       a.dp != nil,
		Keyring:      a.mesh,
		RemoteSites: func() []mesh.Site {
			if a.fed == nil {
				return nil
			}
			return federation.Sites(a.mesh, time.Now())
		},
		Compile: meshview.Compile,
		HandOff: a.handOff(),
	}
	if a.inf != nil {
		ac.Inference = a.inf.Handler()
		ac.CheckModel = a.inf.Check
		ac.Feedback = a.drift.Feedback
	}
	api := httpapi.New(ac)
	a.api = api
	peer := api.PeerRoutes()
	a.peer.Store(&peer)
	a.base, a.cancelBase = context.WithCancel(context.Background())
	// Headers within 10s, bodies that keep moving (httpapi cuts one idle
	// for 30s), idle keep-alive connections closed after 15s, and at most
	// MaxConnections at once, MaxConnectionsPerClient per client, where a
	// new connection closes an idle one: slow or many clients cannot take
	// every file descriptor, and idle ones cannot lock others out.
	a.srv = &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: httpapi.IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return a.base }}
	lim := httpapi.NewConnLimiter(a.srv, a.ln, httpapi.ConnLimits{Max: cfg.MaxConnections, PerClient: cfg.MaxConnectionsPerClient})
	a.reg.MustRegister(lim)
	a.ln = lim
	return nil
}

// allowedHosts are the API's allowed hosts: the configured ones and the
// host of the advertised API address, which peers put in their requests.
func allowedHosts(configured []string, advertised string) []string {
	out := slices.Clone(configured)
	if host, _, err := net.SplitHostPort(advertised); err == nil && host != "" {
		out = append(out, host)
	}
	return out
}

// ID returns the node ID.
func (a *Agent) ID() string { return a.id.ID() }

// Name returns the node name.
func (a *Agent) Name() string { return a.cfg.Name }

// APIAddr returns the address the HTTP API listens on.
func (a *Agent) APIAddr() string { return a.ln.Addr().String() }

// Mesh returns the agent's mesh node.
func (a *Agent) Mesh() *mesh.Mesh { return a.mesh }

// Handler returns the HTTP API handler (for tests).
func (a *Agent) Handler() http.Handler { return a.srv.Handler }

// Run serves the API, joins the configured peers (retrying with backoff)
// and keeps the node's load current, until ctx ends; then it leaves the mesh
// gracefully and closes everything.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("agent started", "id", a.ID(), "tier", a.cfg.Tier, "site", a.cfg.Site, "api", a.APIAddr(), "gossip", a.mesh.GossipAddr())
	errc := make(chan error, 1)
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("agent: API: %w", err)
		}
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// Each component's loop recovers what panics in a pass; a panic
	// outside its passes restarts the loop after a pause rather than end
	// the agent (the guard logs and counts it).
	loops := map[string]func(context.Context){
		"driftwatch": a.drift.Run, "jobs": a.jobRunner.Run, "events": a.events.Run,
		"serving": a.srvg.Run, "controller": a.ctrl.Run, "load": a.loadLoop, "artifacts": a.art.Run,
	}
	if a.dp != nil {
		loops["cert-renewal"] = a.renewLoop
	}
	if a.inf != nil {
		loops["traffic"] = serving.NewTrafficReporter(a.mesh, a.inf.Traffic, a.log).Run
	}
	if a.fed != nil {
		loops["federation"] = a.fed.Run
	}
	for _, component := range a.cfg.without {
		delete(loops, component)
	}
	for component, run := range loops {
		wg.Go(func() {
			a.guard.Loop(runCtx, component, run)
		})
	}
	wg.Go(func() {
		defer a.guard.Recover("join")
		if err := a.mesh.Join(runCtx, a.cfg.Join); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, mesh.ErrClosed) {
			a.log.Warn("join gave up", "err", err)
		}
	})
	wg.Go(func() {
		defer a.guard.Recover("scrub")
		// Blobs corrupted while the agent was down are found before
		// anything serves them (Bytes checks each load as well).
		checked, bad, err := a.art.Scrub(runCtx)
		if err != nil && !errors.Is(err, context.Canceled) {
			a.log.Warn("blob scrub", "err", err)
		}
		if checked > 0 {
			a.log.Info("blob scrub done", "checked", checked, "corrupt", bad)
		}
	})
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case err = <-a.mesh.Fatal():
		a.log.Error("stopping", "err", err)
	}
	// Shut down within about a second: stop taking requests and end the
	// long ones (event streams) while the mesh hears the goodbye.
	start := time.Now()
	cancel()
	a.cancelBase()
	var shut sync.WaitGroup
	shut.Go(func() {
		shutCtx, done := context.WithTimeout(context.Background(), shutdownGrace)
		defer done()
		_ = a.srv.Shutdown(shutCtx)
	})
	if lerr := a.mesh.Leave(shutdownGrace * 7 / 8); lerr != nil {
		// Typical when the whole mesh stops at once: nobody is left to
		// hear the goodbye.
		a.log.Info("leave not confirmed", "err", lerr)
	}
	wg.Wait()
	shut.Wait()
	err = errors.Join(err, a.Close())
	a.log.Info("agent stopped", "took", time.Since(start).Round(time.Millisecond))
	return err
}

// Close stops the agent without leaving the mesh (peers see a failure, as
// after a crash) and closes the store. It is idempotent.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		var errs []error
		if a.srv != nil {
			errs = append(errs, ignoreClosed(a.srv.Close()))
		} else if a.ln != nil {
			errs = append(errs, ignoreClosed(a.ln.Close()))
		}
		if a.mesh != nil {
			errs = append(errs, a.mesh.Close())
		}
		if a.inf != nil {
			errs = append(errs, a.inf.Close())
		}
		errs = append(errs, a.dp.close())
		if a.db != nil {
			errs = append(errs, a.db.Close())
		}
		if a.cancelBase != nil {
			a.cancelBase()
		}
		if a.lock != nil {
			errs = append(errs, a.lock.Close()) // releases the flock
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// loadIdentity reads the node's key from the store, making it at first start.
func loadIdentity(db *storage.DB) (mesh.Identity, error) {
	seed, err := db.Get([]byte(keyIdentity))
	if err == nil {
		return mesh.IdentityFromSeed(seed)
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return mesh.Identity{}, err
	}
	id, err := mesh.NewIdentity()
	if err != nil {
		return mesh.Identity{}, err
	}
	if err := db.Put([]byte(keyIdentity), id.Seed()); err != nil {
		return mesh.Identity{}, err
	}
	return id, nil
}

// checkFingerprint records a hash of the configuration and notes when it
// changed since the last start.
func (a *Agent) checkFingerprint() error {
	b, err := yaml.Marshal(a.cfg)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	fp := hex.EncodeToString(sum[:8])
	old, err := a.db.Get([]byte(keyConfigFingerprint))
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	if string(old) == fp {
		return nil
	}
	if old != nil {
		a.log.Info("configuration changed since last start", "was", string(old), "now", fp)
	}
	return a.db.Put([]byte(keyConfigFingerprint), []byte(fp))
}

// discover builds the local node document from the host and the config.
func (a *Agent) discover() mesh.NodeState {
	c := a.cfg
	caps := discover.Host(c.ProcRoot)
	caps.GPUs, caps.GPUSource = a.discoverGPUs()
	if len(caps.GPUs) == 0 && len(c.GPUs) > 0 {
		caps.GPUs, caps.GPUSource = nil, mesh.SourceDeclared
		for _, g := range c.GPUs {
			for range g.Count {
				caps.GPUs = append(caps.GPUs, mesh.GPU{Index: len(caps.GPUs), Model: g.Model, Memory: int64(g.Memory), Healthy: true, Source: mesh.SourceDeclared})
			}
		}
	}
	caps.RDMA = discover.RDMA(c.SysRoot)
	if len(caps.RDMA) == 0 {
		for _, r := range c.RDMA {
			caps.RDMA = append(caps.RDMA, mesh.RDMADevice{Name: r.Device, Port: r.Port, LinkLayer: r.LinkLayer, Rate: r.Rate, State: "ACTIVE", Fabric: r.Fabric, Source: mesh.SourceDeclared})
		}
	}
	caps.Fabric = discover.Fabric(caps.RDMA)
	if c.Fabric != "" {
		caps.Fabric = c.Fabric
	}
	st := mesh.NodeState{
		Tier:         c.Tier,
		Site:         c.Site,
		Region:       c.Region,
		Labels:       c.Labels,
		Capabilities: caps,
		Build:        c.Build,
	}
	if a.dp != nil {
		if blobs, err := a.dp.store.Blobs(); err == nil {
			for _, b := range blobs {
				st.Locality.Artifacts = append(st.Locality.Artifacts, b.Digest)
			}
			sort.Strings(st.Locality.Artifacts)
		}
	}
	st.Load = a.loadFrom(caps, nil)
	st.Controller = c.controller()
	return st
}

// discoverGPUs asks NVML, unless disabled.
func (a *Agent) discoverGPUs() ([]mesh.GPU, string) {
	if a.cfg.DisableNVML {
		return nil, "none: NVML disabled"
	}
	var opts []nvml.LibraryOption
	if a.cfg.NVMLLibrary != "" {
		opts = append(opts, nvml.WithLibraryPath(a.cfg.NVMLLibrary))
	}
	return discover.GPUs(nvml.New(opts...))
}

// loadFrom is what is free on the node: its capacity less what the
// admitted assignments hold. Placement reasons in reservations, not in
// momentary usage, so a node is never promised twice.
func (a *Agent) loadFrom(caps mesh.Capabilities, held []mesh.Assignment) mesh.Load {
	l := mesh.Load{FreeCPU: caps.CPU.Millicores, FreeMemory: caps.Memory.Total}
	busy := map[int]bool{}
	for _, as := range held {
		if !as.Accepted {
			continue
		}
		l.Workloads++
		l.FreeCPU -= as.CPU
		l.FreeMemory -= as.Memory
		for _, g := range as.GPUs {
			busy[g] = true
		}
	}
	for _, g := range caps.GPUs {
		if g.Healthy && !busy[g.Index] {
			l.FreeGPUs++
		}
	}
	return l
}

// loadLoop re-reads NVML GPUs every LoadInterval, so a device turning
// unhealthy reaches the mesh, and republishes the load when it changed.
func (a *Agent) loadLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.LoadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		local := a.mesh.Local()
		caps := local.Capabilities
		gpusChanged := false
		if caps.GPUSource == mesh.SourceNVML {
			gpus, src := a.discoverGPUs()
			if src == mesh.SourceNVML && !slices.EqualFunc(gpus, caps.GPUs, func(x, y mesh.GPU) bool {
				return x.UUID == y.UUID && x.Healthy == y.Healthy && x.MIG == y.MIG && x.Memory == y.Memory
			}) {
				caps.GPUs, gpusChanged = gpus, true
			}
		}
		load := a.loadFrom(caps, local.Assignments)
		load.QPS = local.Load.QPS // the traffic reporter's
		if load == local.Load && !gpusChanged {
			continue
		}
		// Recompute inside Update: the controller may have changed the
		// assignments since Local was read.
		if err := a.mesh.Update(func(s *mesh.NodeState) {
			qps := s.Load.QPS
			s.Capabilities, s.Load = caps, a.loadFrom(caps, s.Assignments)
			s.Load.QPS = qps
		}); err != nil {
			a.log.Warn("publishing load", "err", err)
		}
	}
}

// shutdownGrace bounds how long Run waits, on the way out, for requests in
// flight to finish and for the mesh to hear that this node leaves.
const shutdownGrace = 800 * time.Millisecond

// lockDataDir takes an exclusive lock on dir/agent.pid and writes this
// process's ID in it, so a second agent on the same data dir says who holds
// it instead of failing inside the database. The lock is released when the
// file is closed, or when the process dies.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "agent.pid")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("agent: data dir %s is in use by pid %s (another strata agent): stop it, or give this one another -data-dir", dir, cmp.Or(strings.TrimSpace(string(b)), "unknown"))
		}
		return nil, fmt.Errorf("agent: data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

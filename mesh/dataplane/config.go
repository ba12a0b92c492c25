package dataplane

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/strata-mesh/strata/storage"
)

// Config configures a Node. Zero values of the tunables mean the documented
// defaults; Store, ServerTLS and ClientTLS are required.
type Config struct {
	// ListenAddr is the UDP address to serve on. Default ":7471". Use
	// "127.0.0.1:0" in tests for an ephemeral port.
	ListenAddr string
	// Store holds the blobs served and receives the blobs pulled.
	Store *storage.Store
	// ServerTLS and ClientTLS are the mutual-auth TLS 1.3 configurations
	// from pki.ServerTLSConfig and pki.ClientTLSConfig.
	ServerTLS, ClientTLS *tls.Config
	// StreamsPerHolder is how many chunk requests a pull keeps in flight on
	// each connection to a holder. Default 4: enough to hide the request
	// round trip and keep a QUIC connection's window full.
	StreamsPerHolder int
	// ConnsPerHolder is how many QUIC connections a pull opens to each
	// holder; StreamsPerHolder streams run on each. Default 1. More
	// connections let one transfer's packet processing use more cores; on
	// two cores the gain is noisy (BenchmarkTransfer, impl=strata-conns2:
	// faster in seven of ten runs by 8-44%, slower in three by 19-25%).
	ConnsPerHolder int
	// MaxConcurrentPulls bounds the pulls running at once; more wait.
	// Default 4.
	MaxConcurrentPulls int
	// MaxConcurrentServes bounds the chunk requests served at once; more
	// wait. Default 256. ("have" and manifest requests are not counted.)
	MaxConcurrentServes int
	// IngressBytesPerSec caps the bytes per second this node receives in
	// chunk bodies, across all pulls (token bucket). Zero: no cap.
	IngressBytesPerSec int64
	// EgressBytesPerSec caps the bytes per second this node sends in chunk
	// bodies, across all serves (token bucket). Zero: no cap. Under a cap
	// two chunks are sent at a time, each at full rate, and other requests
	// wait their turn.
	EgressBytesPerSec int64
	// MaxChunksInFlight bounds the chunk requests one pull keeps in flight
	// across all its holders. Default 4 per holder up to 16. Fewer chunks
	// in flight finish sooner, so a puller can pass them on to its peers
	// sooner.
	MaxChunksInFlight int
	// SeedWindow is how long after sending a chunk to one puller this node
	// answers "get it from your peers" to other pullers asking for the same
	// chunk without force (super-seeding: an origin sends each chunk about
	// once, and the pullers spread it). Negative disables it. Default 10s.
	SeedWindow time.Duration
	// RetryTimeout is how long a pull keeps retrying while no chunk
	// arrives (holders unreachable or all rejected) before it fails; what
	// it fetched is kept for the next Pull to resume. Default 30s.
	RetryTimeout time.Duration
	// HavePoll is how long a holder holds a "have" request open waiting
	// for its next verified chunk, and how long a puller waits before
	// asking a holder that has nothing again. Default 250ms.
	HavePoll time.Duration
	// ProgressInterval is how often PullRequest.Progress is called.
	// Default 250ms.
	ProgressInterval time.Duration
	// Handler serves the HTTP requests peers send with RoundTrip (an
	// agent's forwarded inference, for example), with the sender's
	// authenticated name in the HeaderPeer header. Nil answers them 501.
	Handler http.Handler
	// NodeID derives a node ID from an identity key (the agent sets
	// mesh.IDOf). RoundTrip checks a Peer's ID with it against the key of
	// the certificate the server presents. Nil: a Peer with an ID is
	// refused, since it cannot be checked.
	NodeID func(ed25519.PublicKey) string
	// QUIC is the quic-go configuration; nil means QUICConfig().
	QUIC *quic.Config
	// Logger receives lifecycle logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every tunable at its default. Store
// and the TLS configurations still have to be set.
func DefaultConfig() Config {
	return Config{
		ListenAddr:          ":7471",
		StreamsPerHolder:    4,
		ConnsPerHolder:      1,
		MaxConcurrentPulls:  4,
		MaxConcurrentServes: 256,
		RetryTimeout:        30 * time.Second,
		HavePoll:            250 * time.Millisecond,
		ProgressInterval:    250 * time.Millisecond,
		SeedWindow:          10 * time.Second,
	}
}

// QUICConfig returns the quic-go configuration the data plane uses by
// default: receive windows large enough for a loopback or datacenter
// bandwidth-delay product (64 MiB per stream, 256 MiB per connection),
// keep-alives so idle pooled connections survive NATs, and enough
// incoming streams for many pullers.
func QUICConfig() *quic.Config {
	return &quic.Config{
		MaxIdleTimeout:                 30 * time.Second,
		KeepAlivePeriod:                10 * time.Second,
		InitialStreamReceiveWindow:     8 << 20,
		MaxStreamReceiveWindow:         64 << 20,
		InitialConnectionReceiveWindow: 32 << 20,
		MaxConnectionReceiveWindow:     256 << 20,
		MaxIncomingStreams:             1024,
	}
}

func (c *Config) ensureDefaults() {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.StreamsPerHolder == 0 {
		c.StreamsPerHolder = d.StreamsPerHolder
	}
	if c.ConnsPerHolder == 0 {
		c.ConnsPerHolder = d.ConnsPerHolder
	}
	if c.MaxConcurrentPulls == 0 {
		c.MaxConcurrentPulls = d.MaxConcurrentPulls
	}
	if c.MaxConcurrentServes == 0 {
		c.MaxConcurrentServes = d.MaxConcurrentServes
	}
	if c.RetryTimeout == 0 {
		c.RetryTimeout = d.RetryTimeout
	}
	if c.SeedWindow == 0 {
		c.SeedWindow = d.SeedWindow
	}
	if c.HavePoll == 0 {
		c.HavePoll = d.HavePoll
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.QUIC == nil {
		c.QUIC = QUICConfig()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every problem with the configuration in one error.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("dataplane: Config.Store is required"))
	}
	if c.ServerTLS == nil || c.ClientTLS == nil {
		errs = append(errs, errors.New("dataplane: Config.ServerTLS and Config.ClientTLS are required (see mesh/pki)"))
	}
	if c.StreamsPerHolder < 0 || c.ConnsPerHolder < 0 || c.MaxConcurrentPulls < 0 || c.MaxConcurrentServes < 0 {
		errs = append(errs, errors.New("dataplane: stream, connection and concurrency limits must be >= 0"))
	}
	if c.IngressBytesPerSec < 0 || c.EgressBytesPerSec < 0 {
		errs = append(errs, errors.New("dataplane: bandwidth caps must be >= 0 (0 means no cap)"))
	}
	return errors.Join(errs...)
}

package mesh

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// refusalLogEvery bounds how often a refused (undecryptable) gossip message
// is logged: a peer with the wrong key retries forever, and each try would
// otherwise log a line. Every refusal is still counted.
const refusalLogEvery = 10 * time.Second

// peerLogEvery bounds how often a warning about one source address is
// logged; the ones in between are counted and their number is reported
// with the next line logged for that source.
const peerLogEvery = time.Second

// maxLogSources bounds the sources the rate limiter remembers (a flood of
// spoofed UDP sources must not grow it without end); past it, unknown
// sources share one budget.
const maxLogSources = 4096

// logWriter turns memberlist's log lines ("[ERR] memberlist: ...") into slog
// records at the matching level. Refusals are counted and logged at most
// once per refusalLogEvery; every other warning that names a source address
// is counted and logged at most once per peerLogEvery for that address.
type logWriter struct {
	log     *slog.Logger
	metrics *metrics

	// now is the clock of the per-source limiter; nil means time.Now.
	now func() time.Time

	mu         sync.Mutex
	lastRefuse time.Time
	suppressed int
	// sources limits warnings per sourceKey, not per address: a sender
	// that changes its source port for each packet is one source.
	sources sourceLimiter
}

func (w *logWriter) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(line, "[ERR]"), strings.HasPrefix(line, "[ERROR]"):
		level = slog.LevelError
	case strings.HasPrefix(line, "[WARN]"):
		level = slog.LevelWarn
	case strings.HasPrefix(line, "[INFO]"):
		level = slog.LevelInfo
	}
	msg := line
	if i := strings.Index(line, "memberlist: "); i >= 0 {
		msg = line[i+len("memberlist: "):]
	}
	if isRefusal(msg) {
		w.refuse(msg)
		return len(p), nil
	}
	// memberlist's own errors about peers are mostly transient network
	// noise; they are warnings for an operator, not errors to act on. Sends
	// on a socket closed by our own shutdown are not even that.
	if level == slog.LevelError {
		level = slog.LevelWarn
	}
	// A name conflict is reported by conflictDelegate, with the node IDs.
	// A TCP ping that timed out is a peer slower than the probe interval
	// (a busy host): memberlist's suspicion, logged at info, is the news.
	if strings.Contains(msg, "use of closed network connection") || strings.HasPrefix(msg, "Conflicting address for ") ||
		strings.HasPrefix(msg, "Failed fallback TCP ping: timeout") {
		level = slog.LevelDebug
	}
	if src := logSource(msg); src != "" && level >= slog.LevelWarn {
		w.metrics.peerWarnings.Inc()
		ok, n := w.sources.allow(sourceKey(src), w.clock())
		if !ok {
			w.metrics.logSuppressed.Inc()
			return len(p), nil
		}
		w.log.Log(context.Background(), level, msg, "source", "memberlist", "peer", src, "suppressed_since_last", n)
		return len(p), nil
	}
	w.log.Log(context.Background(), level, msg, "source", "memberlist")
	return len(p), nil
}

// refuse counts a refusal and logs it unless one was logged recently.
func (w *logWriter) refuse(detail string) {
	w.metrics.refused.Inc()
	w.mu.Lock()
	if time.Since(w.lastRefuse) < refusalLogEvery {
		w.suppressed++
		w.mu.Unlock()
		w.metrics.logSuppressed.Inc()
		return
	}
	n := w.suppressed
	w.suppressed, w.lastRefuse = 0, time.Now()
	w.mu.Unlock()
	w.log.Warn("refused gossip from a peer without our gossip key", "detail", detail, "suppressed_since_last", n)
}

// drop is told by the guard transport about each packet or stream it
// dropped before memberlist decoded it: undecryptable ones are refusals,
// the rest are counted by path and reason. Either way the log is
// rate-limited.
func (w *logWriter) drop(path, reason string, from net.Addr) {
	src := "unknown"
	if from != nil {
		src = from.String()
	}
	if reason == dropKey || reason == dropUnencrypted {
		w.refuse(path + " from " + src + ": " + reason)
		return
	}
	w.metrics.invalid.WithLabelValues(path, reason).Inc()
	if reason == dropTimeout || reason == dropClosed {
		// A busy peer answering late, or giving up before it wrote, is
		// what a loaded host looks like, not a fault of the peer:
		// lifeguard's suspicion handles it.
		w.log.Debug("gossip stream ended before its first frame", "path", path, "reason", reason, "peer", src)
		return
	}
	w.metrics.peerWarnings.Inc()
	ok, n := w.sources.allow(sourceKey(src), w.clock())
	if !ok {
		w.metrics.logSuppressed.Inc()
		return
	}
	w.log.Warn("dropped invalid gossip", "path", path, "reason", reason, "peer", src, "suppressed_since_last", n)
}

// logSource returns the address memberlist names with "from=" in a log
// line (LogAddress, LogConn), or "".
func logSource(msg string) string {
	i := strings.Index(msg, "from=")
	if i < 0 {
		return ""
	}
	src := msg[i+len("from="):]
	if j := strings.IndexAny(src, " \t"); j >= 0 {
		src = src[:j]
	}
	return src
}

// sourceKey is what the per-source log limiter counts a warning against:
// the sender's IP without the port, since a sender picks its source port
// freely (a junk sender rotating ports made every packet a new source and
// the agent logged about 1,900 lines a second), and for IPv6 its /64, which
// one host usually holds whole. An address that does not parse is its own
// key.
func sourceKey(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}

func isRefusal(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "no installed keys could decrypt") ||
		strings.Contains(msg, "decrypt packet failed") ||
		strings.Contains(msg, "encryption is configured but remote state is not encrypted") ||
		strings.Contains(msg, "remote state is encrypted and encryption is not configured")
}

// sourceLimiter allows one event per peerLogEvery per source and counts
// the ones it holds back. The zero value is ready to use.
type sourceLimiter struct {
	mu      sync.Mutex
	sources map[string]*sourceState
	pruned  time.Time // last sweep of the table, at most one per peerLogEvery
}

type sourceState struct {
	last       time.Time
	suppressed int
}

// allow reports whether an event from src may be logged now and, if so, how
// many were held back since the last one.
func (l *sourceLimiter) allow(src string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sources == nil {
		l.sources = map[string]*sourceState{}
	}
	st := l.sources[src]
	if st == nil {
		if len(l.sources) >= maxLogSources && now.Sub(l.pruned) >= peerLogEvery {
			l.pruned = now
			for k, s := range l.sources {
				if now.Sub(s.last) >= peerLogEvery && s.suppressed == 0 {
					delete(l.sources, k)
				}
			}
		}
		if len(l.sources) >= maxLogSources {
			src = "other"
			st = l.sources[src]
		}
		if st == nil {
			st = &sourceState{}
			l.sources[src] = st
		}
	}
	if !st.last.IsZero() && now.Sub(st.last) < peerLogEvery {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	return true, n
}

package mesh

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// refusalLogEvery bounds how often a refused (undecryptable) gossip message
// is logged: a peer with the wrong key retries forever, and each try would
// otherwise log a line. Every refusal is still counted.
const refusalLogEvery = 10 * time.Second

// logWriter turns memberlist's log lines ("[ERR] memberlist: ...") into slog
// records at the matching level, and counts and rate-limits refusals.
type logWriter struct {
	log     *slog.Logger
	metrics *metrics
	// suspect is told when memberlist's own probe of a member fails: the
	// only place memberlist says so.
	suspect func(name string, suspect bool)

	mu         sync.Mutex
	lastRefuse time.Time
	suppressed int
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(line, "[ERR]"):
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
	if name, ok := strings.CutPrefix(msg, "Suspect "); ok && w.suspect != nil {
		if name, ok = strings.CutSuffix(name, " has failed, no acks received"); ok {
			w.suspect(name, true)
		}
	}
	if isRefusal(msg) {
		w.metrics.refused.Inc()
		w.mu.Lock()
		if time.Since(w.lastRefuse) < refusalLogEvery {
			w.suppressed++
			w.mu.Unlock()
			return len(p), nil
		}
		n := w.suppressed
		w.suppressed, w.lastRefuse = 0, time.Now()
		w.mu.Unlock()
		w.log.Warn("refused gossip from a peer without our gossip key", "detail", msg, "suppressed_since_last", n)
		return len(p), nil
	}
	// memberlist's own errors about peers are mostly transient network
	// noise; they are warnings for an operator, not errors to act on. Sends
	// on a socket closed by our own shutdown are not even that.
	if level == slog.LevelError {
		level = slog.LevelWarn
	}
	if strings.Contains(msg, "use of closed network connection") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg, "source", "memberlist")
	return len(p), nil
}

func isRefusal(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "no installed keys could decrypt") ||
		strings.Contains(msg, "decrypt packet failed") ||
		strings.Contains(msg, "encryption is configured but remote state is not encrypted") ||
		strings.Contains(msg, "remote state is encrypted and encryption is not configured")
}

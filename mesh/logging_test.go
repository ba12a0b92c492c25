package mesh

import (
	"bytes"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSourceKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, want string
	}{
		{"10.0.0.9:7946", "10.0.0.9"},
		{"10.0.0.9:40001", "10.0.0.9"},
		{"10.0.0.9", "10.0.0.9"},
		{"[::ffff:10.0.0.9]:7946", "10.0.0.9"},
		{"[2001:db8:1:2:aaaa::1]:7946", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::2]:9", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:7946", "fe80::/64"},
		{"unknown", "unknown"},
		{"host.example:7946", "host.example:7946"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := sourceKey(tc.addr); got != tc.want {
				t.Errorf("sourceKey(%q) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
}

// TestWarningsFromRotatingPortsAreOneSource: a junk sender that uses a new
// source port for every packet is limited as one source, on both paths a
// warning takes (memberlist's log lines and the guard transport's drops);
// before the limiter keyed on the IP, every packet logged a line.
func TestWarningsFromRotatingPortsAreOneSource(t *testing.T) {
	t.Parallel()
	const n = 500
	for _, tc := range []struct {
		name string
		send func(w *logWriter, port int)
	}{
		{"memberlist log", func(w *logWriter, port int) {
			log.New(w, "", 0).Printf("[ERR] memberlist: UDP packet too short (0 bytes) from=10.0.0.9:%d", port)
		}},
		{"guard drop", func(w *logWriter, port int) {
			w.drop("packet", "short", &net.UDPAddr{IP: net.IPv4(10, 0, 0, 9), Port: port})
		}},
		{"guard drop, IPv6 /64", func(w *logWriter, port int) {
			w.drop("packet", "short", &net.UDPAddr{IP: net.ParseIP(fmt.Sprintf("2001:db8::%x", port)), Port: port})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			reg := prometheus.NewRegistry()
			t0 := time.Unix(1000, 0)
			w := &logWriter{log: slog.New(slog.NewTextHandler(&buf, nil)), metrics: newMetrics(reg), now: func() time.Time { return t0 }}
			for i := range n {
				tc.send(w, 20000+i)
			}
			if lines := strings.Count(buf.String(), "\n"); lines != 1 {
				t.Errorf("%d warnings from one host on %d ports wrote %d lines, want 1:\n%.2000s", n, n, lines, buf.String())
			}
			if got := counter(t, reg, "strata_gossip_peer_warnings_total"); got != n {
				t.Errorf("peer warnings = %v, want %d", got, n)
			}
			if got := counter(t, reg, "strata_gossip_log_suppressed_total"); got != n-1 {
				t.Errorf("suppressed = %v, want %d", got, n-1)
			}
			// A second later the source logs again, with the count held back.
			t0 = t0.Add(peerLogEvery)
			tc.send(w, 7946)
			if !strings.Contains(buf.String(), fmt.Sprintf("suppressed_since_last=%d", n-1)) {
				t.Errorf("the next line does not report %d suppressed:\n%s", n-1, buf.String())
			}
		})
	}
}

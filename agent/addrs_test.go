package agent

import (
	"context"
	"strings"
	"testing"
)

func TestGossipAdvertise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, bind, advertise string
		join                  []string
		want, err             string
	}{
		{"explicit", "0.0.0.0:7946", "10.1.2.3:7946", nil, "10.1.2.3:7946", ""},
		{"bound to one address", "10.1.2.3:7946", "", []string{"10.9.9.9:7946"}, "", ""},
		{"all interfaces, no peers", "0.0.0.0:7946", "", nil, "", ""},
		{"all interfaces: the route to the peer", "0.0.0.0:7946", "", []string{"127.0.0.9:7946"}, "127.0.0.1:7946", ""},
		{"loopback while the peer is elsewhere", "127.0.0.1:7946", "127.0.0.1:7946", []string{"10.9.9.9:7946"}, "", "set -advertise to this host's address"},
	} {
		got, err := gossipAdvertise(ctx, tc.bind, tc.advertise, tc.join)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPeerAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ explicit, bound, gossip, want string }{
		{"api.example:7470", "127.0.0.1:7470", "10.0.0.7:7946", "api.example:7470"},
		{"", "0.0.0.0:7470", "10.0.0.7:7946", "10.0.0.7:7470"},
		{"", "[::]:7470", "10.0.0.7:7946", "10.0.0.7:7470"},
		{"", "127.0.0.1:7470", "10.0.0.7:7946", ""}, // peers would dial their own loopback
		{"", "127.0.0.1:7470", "127.0.0.1:7946", "127.0.0.1:7470"},
		{"", "10.0.0.7:7470", "10.0.0.7:7946", "10.0.0.7:7470"},
	} {
		if got := peerAddr(tc.explicit, tc.bound, tc.gossip); got != tc.want {
			t.Errorf("peerAddr(%q, %q, %q) = %q, want %q", tc.explicit, tc.bound, tc.gossip, got, tc.want)
		}
	}
}

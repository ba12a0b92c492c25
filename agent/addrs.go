package agent

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// Advertised addresses. Peers on other hosts dial what a node's document
// says, so each address in it must be one they can reach: never an
// unspecified address (0.0.0.0, ::), and never loopback unless the whole
// mesh is on this host.

// gossipAdvertise returns the gossip address to advertise, or "" to let
// the mesh use the bind address (or memberlist's pick of a private
// address). Bound to every interface, it takes the local address of the
// route to the first join peer that resolves: on a host with several
// networks, the one the peers are on. A loopback address is refused when
// the join peers are on other hosts.
func gossipAdvertise(ctx context.Context, bind, advertise string, join []string) (string, error) {
	addr := advertise
	if addr == "" {
		host, port, err := net.SplitHostPort(bind)
		if err != nil {
			return "", nil // Validate reports it
		}
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
			return "", nil
		}
		for _, j := range join {
			if ip := routeTo(ctx, j); ip != nil {
				addr = net.JoinHostPort(ip.String(), port)
				break
			}
		}
		if addr == "" {
			return "", nil
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		for _, j := range join {
			if jh, _, err := net.SplitHostPort(j); err == nil {
				if jip := net.ParseIP(jh); jip != nil && !jip.IsLoopback() {
					flag := "-advertise"
					if advertise == "" {
						flag = "-advertise (it was taken from the route to the join peers)"
					}
					return "", fmt.Errorf("agent: the gossip address %s is loopback, which the join peer %s cannot reach; set %s to this host's address on the peers' network", addr, j, flag)
				}
			}
		}
	}
	return addr, nil
}

// routeTo returns the local address the kernel would send from to reach
// addr (host:port), or nil when it does not resolve or has no route. No
// packet is sent.
func routeTo(ctx context.Context, addr string) net.IP {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	ua, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || ua.IP.IsUnspecified() {
		return nil
	}
	return ua.IP
}

// peerAddr is the address to advertise for a listener bound at bound:
// explicit when set; bound to every interface, the gossip host with the
// listener's port; a loopback listener only when the gossip address is
// loopback too (a mesh on one host), else "" (peers on other hosts would
// dial their own loopback).
func peerAddr(explicit, bound, gossip string) string {
	if explicit != "" {
		return explicit
	}
	h, port, err := net.SplitHostPort(bound)
	if err != nil {
		return ""
	}
	gh, _, _ := net.SplitHostPort(gossip)
	ip := net.ParseIP(h)
	switch {
	case h == "" || ip != nil && ip.IsUnspecified():
		if gh == "" {
			return ""
		}
		return net.JoinHostPort(gh, port)
	case ip != nil && ip.IsLoopback():
		if gip := net.ParseIP(gh); gip != nil && gip.IsLoopback() {
			return bound
		}
		return ""
	}
	return bound
}

// explainNoAddress adds the flag to set to memberlist's refusal to pick an
// address on a host with no private one.
func explainNoAddress(err error) error {
	if err != nil && strings.Contains(err.Error(), "no private IP address found") {
		return fmt.Errorf("%w: set -advertise HOST:PORT to the address peers reach this host at (or -bind to that address)", err)
	}
	return err
}

package mesh

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"
)

// Healing. memberlist gossips to a dead member only for a short while
// (GossipToTheDeadTime), so after a partition longer than the failure
// detector's window both sides hold each other dead for good. Like serf's
// reconnect loop, the mesh keeps trying failed members and every seed it
// was given: one successful push/pull across the healed link makes each
// side refute its death at the other, and the two halves merge.

// reconnectBatch is how many failed members one round tries, beside the
// seeds that are not alive members.
const reconnectBatch = 3

// reconnect tries, every ReconnectInterval (with jitter), to reach the
// seeds that are not alive members and a few failed members, until Close.
func (m *Mesh) reconnect() {
	for {
		t := time.NewTimer(m.cfg.ReconnectInterval + rand.N(m.cfg.ReconnectInterval/4+1))
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-t.C:
		}
		targets := m.reconnectTargets(time.Now())
		if len(targets) == 0 {
			continue
		}
		// memberlist.Join dials each target in turn, up to TCPTimeout each;
		// Close must not wait for that, so the join runs beside the loop
		// and the loop stops waiting at Close (the join then fails fast on
		// the shut-down transport).
		done := make(chan int, 1)
		go func() {
			n, _ := m.ml.Join(targets)
			done <- n
		}()
		select {
		case <-m.stop:
			return
		case n := <-done:
			m.metrics.reconnects.Add(float64(len(targets)))
			if n > 0 {
				m.log.Info("reconnected", "contacted", n, "tried", targets)
			} else {
				m.log.Debug("reconnect found no one", "tried", targets)
			}
		}
	}
}

// reconnectTargets returns the gossip addresses to try now: every seed that
// is not the address of an alive member, and up to reconnectBatch members
// (chosen at random) that failed within ReconnectTimeout, left excluded.
func (m *Mesh) reconnectTargets(now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	alive := map[string]bool{}
	var failed []string
	for _, mi := range m.members {
		if mi.ip == nil {
			continue
		}
		addr := net.JoinHostPort(mi.ip.String(), strconv.Itoa(int(mi.port)))
		switch {
		case mi.status == StatusAlive:
			alive[addr] = true
		case mi.status == StatusFailed && now.Sub(mi.changed) < m.cfg.ReconnectTimeout:
			if s := m.docs[mi.id]; s != nil && s.Leaving {
				continue // left on purpose
			}
			failed = append(failed, addr)
		}
	}
	var out []string
	for _, s := range m.seeds {
		if !alive[s] {
			out = append(out, s)
		}
	}
	rand.Shuffle(len(failed), func(i, j int) { failed[i], failed[j] = failed[j], failed[i] })
	for _, a := range failed[:min(len(failed), reconnectBatch)] {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// dropSelf returns addrs without the ones that reach this node's own
// gossip port (its advertised address, its bind address, or, when bound to
// every interface, any local address), warning once for each.
func (m *Mesh) dropSelf(ctx context.Context, addrs []string) []string {
	// The advertised address as recorded at start: memberlist's LocalNode
	// is written by its own goroutines (UpdateNode) without a lock.
	advHost, advPort, _ := splitHostPort(m.GossipAddr())
	advIP := net.ParseIP(advHost)
	port := advPort
	bindHost, _, _ := splitHostPort(m.cfg.BindAddr)
	bindIP := net.ParseIP(bindHost)
	anyIf := bindHost == "" || (bindIP != nil && bindIP.IsUnspecified())
	var local []net.IP
	if anyIf {
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					local = append(local, n.IP)
				}
			}
		}
	}
	self := func(ip net.IP) bool {
		switch {
		case advIP != nil && ip.Equal(advIP), bindIP != nil && ip.Equal(bindIP):
			return true
		case anyIf && (ip.IsLoopback() || ip.IsUnspecified()):
			return true
		case anyIf:
			return slices.ContainsFunc(local, ip.Equal)
		}
		return false
	}
	var out []string
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		if err != nil {
			out = append(out, a) // memberlist says what is wrong with it
			continue
		}
		if pn, err := strconv.Atoi(p); err != nil || pn != port {
			out = append(out, a)
			continue
		}
		ips := []net.IP{net.ParseIP(host)}
		if ips[0] == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resolved, err := net.DefaultResolver.LookupIP(rctx, "ip", host)
			cancel()
			if err != nil {
				out = append(out, a) // unresolvable now; memberlist retries it
				continue
			}
			ips = resolved
		}
		if slices.ContainsFunc(ips, self) {
			m.log.Warn("join address is this node's own; skipped", "addr", a)
			continue
		}
		out = append(out, a)
	}
	return out
}

// Fatal delivers at most one error after which this node must stop: its
// name is already held by another node, with another identity, that
// started before it. The agent exits with it.
func (m *Mesh) Fatal() <-chan error { return m.fatal }

// nameTaken handles a conflict on this node's own name: another node with
// another identity claims it. The node that started later gives way: it
// reports a fatal error (once); the earlier one logs it and stays.
func (m *Mesh) nameTaken(otherID, otherAddr string, otherStarted int64) {
	mine := m.started.UnixNano()
	later := otherStarted != 0 && (otherStarted < mine || (otherStarted == mine && otherID < m.id))
	if !later {
		m.log.Error("another node claims this node's name; it is refused and should stop",
			"name", m.cfg.Name, "other_id", otherID, "other_addr", otherAddr)
		return
	}
	err := fmt.Errorf("mesh: the name %q is already held by node %s at %s, which started before this one; give this agent another -name, or stop the other one", m.cfg.Name, otherID, otherAddr)
	select {
	case m.fatal <- err:
	default:
	}
}

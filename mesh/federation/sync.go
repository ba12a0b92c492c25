package federation

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/strata-mesh/strata/mesh"
)

// maxFrame bounds one sync message: a whole global catalog.
const maxFrame = 64 << 20

// syncMsg is one message of the sync exchange. The dialer sends its digest;
// the other side answers with its digest and, when they differ, its
// records; the dialer then sends its own records if they differed.
type syncMsg struct {
	Digest  string       `json:"digest"`
	Entries []mesh.Entry `json:"entries,omitempty"`
}

// digest is a hash of every global record's key, version and origin.
func digest(es []mesh.Entry) string {
	h := sha256.New()
	for _, e := range es {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", e.Key, e.Version, e.Origin)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func (f *Federation) goSync(ctx context.Context, p peer.ID) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := f.sync(ctx, p); err != nil && ctx.Err() == nil {
			f.metrics.errors.WithLabelValues("sync").Inc()
			f.cfg.Logger.Debug("federation sync failed", "peer", p, "err", err)
		}
	}()
}

// sync exchanges global catalogs with p (the dialer's side).
func (f *Federation) sync(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h := f.Host()
	if h == nil {
		return nil
	}
	s, err := h.NewStream(ctx, p, protoSync)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	mine := f.cfg.Mesh.GlobalEntries()
	d := digest(mine)
	if err := writeMsg(s, syncMsg{Digest: d}); err != nil {
		return err
	}
	var theirs syncMsg
	if err := readMsg(bufio.NewReader(s), &theirs); err != nil {
		return err
	}
	f.metrics.syncs.Inc()
	if theirs.Digest == d {
		return nil
	}
	f.merge(theirs.Entries)
	return writeMsg(s, syncMsg{Digest: d, Entries: mine})
}

// serveSync is the other side of sync.
func (f *Federation) serveSync(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(s)
	var theirs syncMsg
	if err := readMsg(r, &theirs); err != nil {
		f.metrics.malformed.Inc()
		_ = s.Reset()
		return
	}
	mine := f.cfg.Mesh.GlobalEntries()
	d := digest(mine)
	if theirs.Digest == d {
		_ = writeMsg(s, syncMsg{Digest: d})
		return
	}
	if err := writeMsg(s, syncMsg{Digest: d, Entries: mine}); err != nil {
		return
	}
	var back syncMsg
	if err := readMsg(r, &back); err != nil {
		if !errors.Is(err, io.EOF) {
			f.metrics.malformed.Inc()
		}
		return
	}
	f.merge(back.Entries)
}

// gatewaysMsg answers a gateway lookup: the answering agent's site and
// its gateways, best first.
type gatewaysMsg struct {
	Site     string    `json:"site"`
	Gateways []Gateway `json:"gateways"`
}

// serveGateways tells the dialer where this agent's site's gateways are.
func (f *Federation) serveGateways(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	m := f.cfg.Mesh
	sum := Summarize(m.Site(), m.Nodes(), Gateways(m.Nodes(), m.Site(), f.cfg.Gateways))
	b := encode(gatewaysMsg{Site: sum.Site, Gateways: sum.Gateways})
	if _, err := s.Write(b); err != nil {
		_ = s.Reset()
	}
}

// askGateways asks peer p where its site's gateways are.
func (f *Federation) askGateways(ctx context.Context, p peer.ID) ([]Gateway, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h := f.Host()
	if h == nil {
		return nil, "", errors.New("no host")
	}
	s, err := h.NewStream(ctx, p, protoGateways)
	if err != nil {
		return nil, "", err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	var msg gatewaysMsg
	if err := json.NewDecoder(io.LimitReader(s, 1<<20)).Decode(&msg); err != nil {
		f.metrics.malformed.Inc()
		return nil, "", err
	}
	return msg.Gateways, msg.Site, nil
}

func writeMsg(w io.Writer, m syncMsg) error {
	b := encode(m)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readMsg(r io.Reader, m *syncMsg) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("sync message of %d bytes, over %d", size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, m)
}

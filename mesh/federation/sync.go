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

func (g *gateway) goSync(ctx context.Context, p peer.ID) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := g.sync(ctx, p); err != nil && ctx.Err() == nil {
			g.f.metrics.errors.WithLabelValues("sync").Inc()
			g.f.cfg.Logger.Debug("federation sync failed", "peer", p, "err", err)
		}
	}()
}

// sync exchanges global catalogs with p (the dialer's side).
func (g *gateway) sync(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := g.h.NewStream(ctx, p, protoSync)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	mine := g.f.cfg.Mesh.GlobalEntries()
	d := digest(mine)
	if err := writeMsg(s, syncMsg{Digest: d}); err != nil {
		return err
	}
	var theirs syncMsg
	if err := readMsg(bufio.NewReader(s), &theirs); err != nil {
		return err
	}
	g.f.metrics.syncs.Inc()
	if theirs.Digest == d {
		return nil
	}
	g.merge(theirs.Entries)
	return writeMsg(s, syncMsg{Digest: d, Entries: mine})
}

// serveSync is the other side of sync.
func (g *gateway) serveSync(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(s)
	var theirs syncMsg
	if err := readMsg(r, &theirs); err != nil {
		g.f.metrics.malformed.Inc()
		_ = s.Reset()
		return
	}
	mine := g.f.cfg.Mesh.GlobalEntries()
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
			g.f.metrics.malformed.Inc()
		}
		return
	}
	g.merge(back.Entries)
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

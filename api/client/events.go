package client

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/strata-mesh/strata/api"
)

// Events opens the agent's event stream: GET /v1/events, server-sent
// events of placements, drift, jobs and rollouts as the agent learns of
// them. since < 0 streams new events only; 0 replays every event the
// agent kept first; n > 0 replays those after sequence number n. The
// stream runs until ctx ends, Close is called or the agent goes away.
//
//	s, err := c.Events(ctx, 0)
//	if err != nil { return err }
//	defer s.Close()
//	for s.Next() {
//		fmt.Println(s.Event().Type, s.Event().Message)
//	}
//	return s.Err()
func (c *Client) Events(ctx context.Context, since int64) (*EventStream, error) {
	return c.events(ctx, since, true)
}

// KeptEvents is Events without following: the stream ends after the
// events the agent kept (those after since; 0 for all of them).
func (c *Client) KeptEvents(ctx context.Context, since int64) (*EventStream, error) {
	return c.events(ctx, max(since, 0), false)
}

func (c *Client) events(ctx context.Context, since int64, follow bool) (*EventStream, error) {
	q := url.Values{}
	if since >= 0 {
		q.Set("since", strconv.FormatInt(since, 10))
	}
	if !follow {
		q.Set("follow", "false")
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/events", query: q, size: -1})
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	return &EventStream{body: resp.Body, sc: sc, ctx: ctx}, nil
}

// maxEventLine bounds one line of the stream.
const maxEventLine = 1 << 20

// EventStream reads an agent's events, one at a time. It is not safe for
// concurrent use.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	ctx  context.Context
	ev   api.Event
	raw  []byte
	err  error
	// undecoded counts the data lines skipped (see Undecoded).
	undecoded int
}

// Next waits for the next event and reports whether there is one. It
// returns false when the stream ends; Err then says why. Lines that are
// not an event's JSON (comments, keep-alives, an unknown shape) are
// skipped; Undecoded counts the data lines among them.
func (s *EventStream) Next() bool {
	for s.sc.Scan() {
		data, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev api.Event
		if json.Unmarshal([]byte(data), &ev) != nil {
			s.undecoded++
			continue
		}
		s.ev, s.raw = ev, []byte(data)
		return true
	}
	s.err = s.sc.Err()
	if s.ctx.Err() != nil {
		s.err = s.ctx.Err()
	}
	return false
}

// Event is the event Next found.
func (s *EventStream) Event() api.Event { return s.ev }

// Raw is the event's JSON as the agent sent it. It is valid until the
// next call of Next.
func (s *EventStream) Raw() []byte { return s.raw }

// Undecoded is how many data lines Next skipped so far because they did
// not decode as an event: not JSON, or of a shape this client does not
// know (an agent of another version).
func (s *EventStream) Undecoded() int { return s.undecoded }

// Err is why the stream ended: nil when the agent ended it, ctx's error
// when the context did, or the read error.
func (s *EventStream) Err() error { return s.err }

// Close ends the stream. It may be called more than once.
func (s *EventStream) Close() error { return s.body.Close() }

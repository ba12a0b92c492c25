package agent

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats for Config.LogFormat.
const (
	// LogFormatLogfmt writes one line of key=value pairs per record
	// (slog's text handler).
	LogFormatLogfmt = "logfmt"
	// LogFormatJSON writes one JSON object per line (slog's JSON
	// handler), for log shippers.
	LogFormatJSON = "json"
)

// logKeyAgent is the key naming the agent on every record of its logger.
// It is not "node": components log the node a record is about under that
// key ("member status" node=edge-b-1), and a logfmt line would then carry
// node= twice.
const logKeyAgent = "agent"

// NewLogger returns a logger that writes records at level and above to w,
// as logfmt or JSON (format is LogFormatLogfmt, LogFormatJSON, or "" for
// logfmt). It fails only for another format.
func NewLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", LogFormatLogfmt:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%q is not a log format: use logfmt or json", format)
}

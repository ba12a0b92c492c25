package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer that several agents' goroutines may log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logfmtKeys returns the keys of one line of slog's text handler, in
// order: key=value pairs, values quoted when they hold spaces.
func logfmtKeys(line string) []string {
	var keys []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimLeft(line, " ") {
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			return append(keys, line)
		}
		keys = append(keys, k)
		if strings.HasPrefix(rest, `"`) {
			i := 1
			for i < len(rest) && rest[i] != '"' {
				if rest[i] == '\\' {
					i++
				}
				i++
			}
			line = rest[min(i+1, len(rest)):]
		} else {
			_, line, _ = strings.Cut(rest, " ")
		}
	}
	return keys
}

// jsonKeys returns the top-level keys of one JSON object, in order,
// duplicates kept (encoding/json's Unmarshal would hide them).
func jsonKeys(tb testing.TB, line string) []string {
	tb.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		tb.Fatalf("not a JSON object: %q", line)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			tb.Fatalf("%q: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			tb.Fatalf("%q: %v", line, err)
		}
	}
	return keys
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	for format, want := range map[string]string{
		"":     `level=INFO msg="member status" agent=a node=c status=alive`,
		"json": `"level":"INFO","msg":"member status","agent":"a","node":"c","status":"alive"}`,
	} {
		var b bytes.Buffer
		log, err := NewLogger(&b, format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		log.With(logKeyAgent, "a").Info("member status", "node", "c", "status", "alive")
		log.Debug("below the level")
		if got := strings.TrimSpace(b.String()); !strings.HasSuffix(got, want) || strings.Count(got, "\n") != 0 {
			t.Errorf("format %q: %s, want it to end %s", format, got, want)
		}
	}
	if _, err := NewLogger(io.Discard, "xml", nil); err == nil || !strings.Contains(err.Error(), "use logfmt or json") {
		t.Errorf("xml: %v, want an error naming the formats", err)
	}
}

// TestAgentLogKeysAppearOnce runs a small mesh that logs members joining
// and checks that no record, in either format, carries a key twice: the
// agent's own name rides on every record, the member a record is about
// under node.
func TestAgentLogKeysAppearOnce(t *testing.T) {
	t.Parallel()
	for _, format := range []string{LogFormatLogfmt, LogFormatJSON} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			var out syncBuffer
			log, err := NewLogger(&out, format, slog.LevelInfo)
			if err != nil {
				t.Fatal(err)
			}
			devMesh(t, 2, func(c *Config) { c.Logger = log })
			members := 0
			for line := range strings.Lines(out.String()) {
				var keys []string
				if format == LogFormatJSON {
					keys = jsonKeys(t, line)
				} else {
					keys = logfmtKeys(line)
				}
				seen := map[string]bool{}
				for _, k := range keys {
					if seen[k] {
						t.Errorf("key %s twice: %s", k, line)
					}
					seen[k] = true
				}
				if strings.Contains(line, "member status") && seen["node"] && seen[logKeyAgent] {
					members++
				}
			}
			if members == 0 {
				t.Errorf("no member status record with agent and node:\n%s", out.String())
			}
		})
	}
}

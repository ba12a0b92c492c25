package policy

import (
	"strings"
	"testing"
)

// TestCanaryGateWarning: a canary of fewer requests than the windowed
// drift detector needs rows is warned of, naming the least that works;
// the streaming detector, or enough requests, is not.
func TestCanaryGateWarning(t *testing.T) {
	t.Parallel()
	const base = "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m, version: \"1\"}\n"
	for _, c := range []struct {
		name, spec, want string
	}{
		{"default canary, window 500", "  drift: {}\n  rollout: {}\n", "100 requests are fewer than the 700 sampled rows"},
		{"enough requests", "  drift: {window: 100}\n  rollout: {canaryRequests: 140}\n", ""},
		{"streaming detector", "  drift: {stream: {}}\n  rollout: {}\n", ""},
		{"no drift", "  rollout: {}\n", ""},
	} {
		docs, err := Parse("s.yaml", []byte(base+c.spec))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := strings.Join(docs[0].Warnings(), "\n")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: warnings %q, want %q", c.name, got, c.want)
		}
	}
}

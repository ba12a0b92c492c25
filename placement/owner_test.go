package placement_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/strata-mesh/strata/placement"
)

func TestOwnerStability(t *testing.T) {
	var agents []string
	for k := range 10 {
		agents = append(agents, fmt.Sprintf("agent-%d", k))
	}
	keys := make([]string, 5000)
	for k := range keys {
		keys[k] = fmt.Sprintf("InferenceService/svc-%d", k)
	}
	before := map[string]string{}
	load := map[string]int{}
	for _, k := range keys {
		before[k] = placement.Owner(k, agents)
		load[before[k]]++
	}
	// Roughly even: every agent owns 10% ± 3% of the keys.
	for _, a := range agents {
		if n := load[a]; n < 350 || n > 650 {
			t.Errorf("%s owns %d of %d keys", a, n, len(keys))
		}
	}
	// Order of candidates does not matter.
	rev := slices.Clone(agents)
	slices.Reverse(rev)
	for _, k := range keys[:500] {
		if placement.Owner(k, rev) != before[k] {
			t.Fatalf("%s: owner depends on candidate order", k)
		}
	}
	// An agent leaves: only its keys move.
	gone := "agent-3"
	without := slices.DeleteFunc(slices.Clone(agents), func(a string) bool { return a == gone })
	moved := 0
	for _, k := range keys {
		now := placement.Owner(k, without)
		if before[k] != gone && now != before[k] {
			t.Fatalf("%s moved from %s to %s when unrelated %s left", k, before[k], now, gone)
		}
		if before[k] == gone {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the leaving agent owned nothing")
	}
	// An agent joins: keys move only to it.
	with := append(slices.Clone(agents), "agent-new")
	gained := 0
	for _, k := range keys {
		now := placement.Owner(k, with)
		if now != before[k] && now != "agent-new" {
			t.Fatalf("%s moved from %s to %s when agent-new joined", k, before[k], now)
		}
		if now == "agent-new" {
			gained++
		}
	}
	if gained < 300 || gained > 650 {
		t.Errorf("the new agent took %d of %d keys, want about 1/11", gained, len(keys))
	}
	if placement.Owner("k", nil) != "" {
		t.Error("no candidates: want \"\"")
	}
}

func TestOwnerWeightIsStable(t *testing.T) {
	// Agents on other machines and versions must agree, so the weight is
	// pinned: if this value changes, owners move on upgrade.
	if got := placement.OwnerWeight("InferenceService/fraud-scorer", "agent-1"); got != 0x980021929fd059e3 {
		t.Fatalf("OwnerWeight changed: %#x", got)
	}
	if placement.OwnerWeight("a", "bc") == placement.OwnerWeight("ab", "c") {
		t.Error("key and candidate are not separated")
	}
}

package jobs

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/trainer"
)

// TestRecordsKeepTheLaunchersJSON: steps, member states and gang ranks,
// converted for the job, gang and gang member records, write the JSON
// they wrote when the records held trainer's own types, and ranks come
// back as they went. A field added to trainer.Step, MemberStatus or
// Member fails here until the catalog's wire type (and its golden
// schema) says whether it travels.
func TestRecordsKeepTheLaunchersJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ domain, wire reflect.Type }{
		{reflect.TypeFor[trainer.Step](), reflect.TypeFor[catalog.Step]()},
		{reflect.TypeFor[trainer.MemberStatus](), reflect.TypeFor[catalog.MemberStatus]()},
		{reflect.TypeFor[trainer.Member](), reflect.TypeFor[catalog.Rank]()},
	} {
		if d, w := c.domain.NumField(), c.wire.NumField(); d != w {
			t.Errorf("%v has %d fields, %v %d: does the new one travel?", c.domain, d, c.wire, w)
		}
	}
	same := func(what string, domain, wire any) {
		t.Helper()
		a, _ := json.Marshal(domain)
		b, _ := json.Marshal(wire)
		if string(a) != string(b) {
			t.Errorf("%s: trainer writes %s, the record %s", what, a, b)
		}
	}
	steps := []trainer.Step{{Step: 1, Metrics: map[string]float64{"loss": 0.5}}, {Step: 2, Metrics: map[string]float64{"loss": 0.25}}}
	same("steps", steps, stepsOf(steps))
	ms := []trainer.MemberStatus{{Rank: 0, Node: "a", State: trainer.StateRunning, ExitCode: -1}, {Rank: 1, Node: "b", State: trainer.StateFailed, ExitCode: 2, Error: "exit status 2"}}
	same("members", ms, statusesOf(ms))
	members := []trainer.Member{{Node: "a", Addr: "10.0.0.1", GPUs: []int{0, 1}}, {Node: "b"}}
	ranks := gangRanks(members)
	same("ranks", members, ranks)
	back := gangMembers(ranks)
	if !reflect.DeepEqual(back, members) {
		t.Errorf("gangMembers(gangRanks(%v)) = %v", members, back)
	}
	if back[0].GPUs[0] = 7; ranks[0].GPUs[0] != 0 {
		t.Error("the launcher's members share GPUs with the gang record")
	}
	if stepsOf(nil) != nil || statusesOf(nil) != nil {
		t.Error("nil did not convert to nil")
	}
}

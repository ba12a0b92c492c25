package driftwatch

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/internal/catalog"
)

// TestRecordScoresKeepTheMonitorsJSON: a monitor's scores and streaming
// state, converted for the drift record, write the JSON they wrote when
// the record held infer/drift's own types. A field added to drift.Score
// or drift.StreamScore fails here until the catalog's wire type (and its
// golden schema) says whether it travels.
func TestRecordScoresKeepTheMonitorsJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ domain, wire reflect.Type }{
		{reflect.TypeFor[drift.Score](), reflect.TypeFor[catalog.Score]()},
		{reflect.TypeFor[drift.StreamScore](), reflect.TypeFor[catalog.StreamScore]()},
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
			t.Errorf("%s: infer/drift writes %s, the record %s", what, a, b)
		}
	}
	ss := []drift.Score{{Name: "amount", Statistic: 0.3, PValue: 0.01, Drifted: true}, {Name: "prediction", Statistic: 0.1, PValue: 1}}
	same("scores", ss, scoresOf(ss))
	st := []drift.StreamScore{{Name: "amount", Upper: 1.5, Lower: 0.2, Threshold: 4.1, Spread: 2, SpreadThreshold: 5,
		Alarms: 2, LastAlarm: 900, Side: drift.SideUp, AlarmStatistic: 1.2, Holding: true, Drifted: true}}
	same("stream", st, streamOf(st))
	if scoresOf(nil) != nil || streamOf(nil) != nil {
		t.Error("nil did not convert to nil")
	}
}

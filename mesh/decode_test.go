package mesh

import (
	"encoding/json"
	"testing"
	"unsafe"
)

// TestDecodedValueSharesTheBytes: a decoded entry's Value is held once,
// in the bytes it was decoded from, and reads as it was written, also when
// a dependency carries a field of the same name before it.
func TestDecodedValueSharesTheBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw    string
		shared bool
	}{
		{`{"key":"policies/a","value":{"replicas":2},"version":7,"origin":"n1"}`, true},
		{`{"deps":[{"key":"p","version":1,"value":{"replicas":2}}],"key":"policies/a","value":{"replicas":2},"version":7,"origin":"n1"}`, true},
		{`{"key":"policies/a","value": {"replicas":2},"version":7,"origin":"n1"}`, false}, // not as encoded here: a copy
	} {
		raw := tc.raw
		b := []byte(raw)
		e, err := decodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Replicas int }
		if err := json.Unmarshal(e.Value, &v); err != nil || v.Replicas != 2 {
			t.Errorf("%s: value %s (%v)", raw, e.Value, err)
		}
		start, end := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[len(b)-1]))
		p := uintptr(unsafe.Pointer(&e.Value[0]))
		if shared := p >= start && p <= end; shared != tc.shared {
			t.Errorf("%s: value shares the entry's bytes: %v, want %v", raw, shared, tc.shared)
		}
		if tc.shared && cap(e.Value) != len(e.Value) {
			t.Errorf("%s: value has room to grow into the entry's bytes", raw)
		}
	}
}

package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
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

// TestPushPullEncoding: the push/pull and bucket payloads written from
// held encodings decode as json.Marshal's of the same values would, with
// and without certificates, empty or not.
func TestPushPullEncoding(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"id":"a","version":3}`)
	entries := [][]byte{[]byte(`{"key":"policies/K/x","version":1}`), []byte(` {"key":"placements/K/x", "version":2} `)}
	for _, tc := range []struct {
		nodes, entries, certs [][]byte
	}{{nil, nil, nil}, {[][]byte{doc}, entries, nil}, {[][]byte{doc, doc}, entries[:1], [][]byte{{1, 2, 3}}}} {
		b, err := encodePushPull(tc.nodes, tc.entries, tc.certs)
		if err != nil {
			t.Fatal(err)
		}
		var got pushPull
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s does not decode: %v", b, err)
		}
		if len(got.Nodes) != len(tc.nodes) || len(got.Entries) != len(tc.entries) || len(got.Certs) != len(tc.certs) {
			t.Errorf("%s: %d nodes, %d entries, %d certs; want %d, %d, %d", b, len(got.Nodes), len(got.Entries), len(got.Certs), len(tc.nodes), len(tc.entries), len(tc.certs))
		}
		for i, e := range got.Entries {
			if !bytes.Equal(bytes.TrimSpace(e), bytes.TrimSpace(tc.entries[i])) {
				t.Errorf("entry %d: %s, want %s", i, e, tc.entries[i])
			}
		}
		if len(tc.certs) > 0 && !bytes.Equal(got.Certs[0], tc.certs[0]) {
			t.Errorf("cert %v, want %v", got.Certs[0], tc.certs[0])
		}
	}
	m := &Mesh{cfg: Config{Name: "me"}, kv: map[string]*held{}}
	for i, raw := range entries {
		e, err := decodeEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		e.stamp(time.Now().Add(-time.Hour))
		m.kv[fmt.Sprint(i)] = holding(e)
	}
	var all []int
	for i := range syncBuckets {
		all = append(all, i)
	}
	for _, buckets := range [][]int{nil, all} {
		b := m.entriesPayload(buckets, true)
		var got bucketEntries
		if b[0] != msgBucketEntries || json.Unmarshal(b[1:], &got) != nil {
			t.Fatalf("bucket payload %q does not decode", b)
		}
		if want := len(entries) * min(len(buckets), 1); got.From != "me" || !got.Reply || len(got.Entries) != want || len(got.Buckets) != len(buckets) {
			t.Errorf("bucket payload %+v: want from me, a reply, %d buckets and %d entries", got, len(buckets), want)
		}
	}
}

// TestSpilledEntriesAreSmall: what the catalog keeps of a spilled entry
// (held without the entry) is what it holds per record once idle, twice
// over in an agent's resident set (the collector's goal): at 10,000
// policies an Entry (240 bytes) a record was a quarter of the heap.
// Growing held past 144 bytes (its allocation size class) should be a
// choice, not an accident.
func TestSpilledEntriesAreSmall(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(held{}); n > 144 {
		t.Errorf("held is %d bytes, want at most 144", n)
	}
	if n := unsafe.Sizeof(held{}); n >= unsafe.Sizeof(Entry{}) {
		t.Errorf("held (%d bytes) is not smaller than Entry (%d)", n, unsafe.Sizeof(Entry{}))
	}
}

// TestSpilledEntryKeepsWhenWritten: a spilled entry lists with the time
// its writer wrote it, the same instant; one its held form cannot say
// (out of Unix nanoseconds' range) lists with none.
func TestSpilledEntryKeepsWhenWritten(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		written time.Time
		want    time.Time
	}{
		{time.Date(2026, 11, 29, 20, 50, 1, 123456789, time.UTC), time.Date(2026, 11, 29, 20, 50, 1, 123456789, time.UTC)},
		{time.Date(2026, 11, 29, 21, 50, 1, 5, time.FixedZone("CET", 3600)), time.Date(2026, 11, 29, 20, 50, 1, 5, time.UTC)},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}},
	} {
		e := &Entry{Key: "policies/x", Value: []byte(`{}`), Version: 1, Origin: "a", Written: c.written}
		if got := holding(e).spill().entry().Written; !got.Equal(c.want) {
			t.Errorf("written %v: spilled lists %v, want %v", c.written, got, c.want)
		}
	}
}

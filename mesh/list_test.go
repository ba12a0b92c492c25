package mesh

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestListInKeyOrder puts and deletes keys in random order and checks
// that List answers each table's live entries sorted, as a sort of the
// whole catalog would.
func TestListInKeyOrder(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*held{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		key := fmt.Sprintf("%s/k-%d", []string{"policies", "placements", "jobs"}[rng.IntN(3)], rng.IntN(700))
		switch rng.IntN(4) {
		case 0:
			m.deleteEntryLocked(key)
		default:
			m.setEntryLocked(&Entry{Key: key, Version: uint64(i), Deleted: rng.IntN(10) == 0})
		}
	}
	for _, prefix := range []string{"policies/", "placements/k-1", "jobs/", "nothing/", "", "jo"} {
		var want []string
		for k, e := range m.kv {
			if strings.HasPrefix(k, prefix) && !e.Deleted {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		var got []string
		for _, e := range m.List(prefix) {
			got = append(got, e.Key)
		}
		if keys := m.Keys(prefix); !slices.Equal(keys, want) {
			t.Errorf("Keys(%q): %d keys, want %d in order", prefix, len(keys), len(want))
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q): %d keys, want %d in order (%v…)", prefix, len(got), len(want), want[:min(len(want), 3)])
		}
	}
}

// TestChangedKeys: a reader that kept a table's version is told every key
// written, deleted or collected since, each once, or told to list afresh
// once the log no longer reaches back that far; never a partial answer.
func TestChangedKeys(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*held{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}, tableLogs: map[string]*changeLog{}}
	rng := rand.New(rand.NewPCG(3, 4))
	// history[v] is the key whose change made version v of "placements".
	history := []string{""}
	type reader struct{ at uint64 }
	var readers []reader
	forgot, answered := 0, 0
	for i := range 30000 {
		table := []string{"placements", "policies"}[rng.IntN(2)]
		key := fmt.Sprintf("%s/k-%d", table, rng.IntN(300))
		if rng.IntN(5) == 0 {
			m.deleteEntryLocked(key)
		} else {
			m.setEntryLocked(&Entry{Key: key, Version: uint64(i)})
		}
		if table == "placements" {
			history = append(history, key)
		}
		if i%1000 == 0 {
			readers = append(readers, reader{at: m.TableVersion("placements")})
		}
	}
	now := m.TableVersion("placements")
	if int(now) != len(history)-1 {
		t.Fatalf("version %d after %d changes", now, len(history)-1)
	}
	for _, r := range append(readers, reader{at: now}, reader{at: now + 5}) {
		keys, v, ok := m.ChangedKeys("placements", r.at)
		if v != now {
			t.Errorf("since %d: version now %d, want %d", r.at, v, now)
		}
		if r.at > now {
			if ok {
				t.Errorf("since %d, ahead of the table (%d): answered, want a fresh listing", r.at, now)
			}
			continue
		}
		if !ok {
			forgot++
			if now-r.at <= minChangeLog {
				t.Errorf("since %d: %d changes back, within the log, but told to list afresh", r.at, now-r.at)
			}
			continue
		}
		answered++
		want := map[string]bool{}
		for _, k := range history[r.at+1:] {
			want[k] = true
		}
		got := map[string]bool{}
		for _, k := range keys {
			if got[k] {
				t.Errorf("since %d: %s told twice", r.at, k)
			}
			got[k] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("since %d: told %d keys, want the %d changed", r.at, len(got), len(want))
		}
	}
	if forgot == 0 || answered < 3 {
		t.Errorf("%d readers answered, %d told to list afresh: the test no longer covers both", answered, forgot)
	}
	if _, _, ok := m.ChangedKeys("nothing", 0); !ok {
		t.Error("a table never written, read from 0: want an empty answer")
	}
}

// TestSettledDigest: the settled digest, kept as entries are set and
// deleted, is the hash of the entries held for catalogSettle, as a scan of
// the catalog finds, while entries are replaced, deleted and settle, also
// set out of the order of their times.
func TestSettledDigest(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*held{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}, tableLogs: map[string]*changeLog{}}
	rng := rand.New(rand.NewPCG(5, 6))
	start := time.Unix(1e9, 0)
	now := start
	for i := range 20000 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		key := fmt.Sprintf("placements/k-%d", rng.IntN(500))
		if rng.IntN(6) == 0 {
			m.deleteEntryLocked(key)
		} else {
			e := &Entry{Key: key, Version: uint64(i)}
			e.stamp(now.Add(-time.Duration(rng.IntN(5)) * time.Millisecond)) // out of order, a little
			m.setEntryLocked(e)
		}
		if i%97 == 0 {
			at := now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			var want uint64
			for _, e := range m.kv {
				if e.sinceSeen(at) >= catalogSettle {
					want ^= e.hash
				}
			}
			if got := m.settledDigestLocked(at); got != want {
				t.Fatalf("write %d: settled digest %x, a scan finds %x", i, got, want)
			}
			now = at
		}
	}
	if len(m.unsettled) > 1000 {
		t.Errorf("%d entries kept as unsettled after the last digest", len(m.unsettled))
	}
}

// TestUnsettledBoundedWithoutDigests: an agent asked for no digest (no
// peer probes it) keeps only the entries set within catalogSettle as
// unsettled, not every write.
func TestUnsettledBoundedWithoutDigests(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*held{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}, tableLogs: map[string]*changeLog{}}
	now := time.Unix(1e9, 0)
	for i := range 20000 {
		now = now.Add(10 * time.Millisecond) // 200 s of writes, 100 a second
		e := &Entry{Key: fmt.Sprintf("placements/k-%d", i%50), Version: uint64(i)}
		e.stamp(now)
		m.setEntryLocked(e)
	}
	if want := int(catalogSettle/(10*time.Millisecond)) + 1; len(m.unsettled) > want {
		t.Errorf("%d entries kept as unsettled, want at most the %d set within %v", len(m.unsettled), want, catalogSettle)
	}
}

// Package intern shares equal strings among the records an agent keeps.
// At 10,000 policies most strings of the records held in memory (kinds,
// states, owners, node names, reasons, writers' IDs) repeat across
// thousands of them; decoded, each was an allocation of its own.
package intern

import "sync"

// Max bounds the distinct strings a Strings holds. Past it a Strings
// starts afresh: the strings it handed out stay valid, and the values
// seen from then on are shared again, so a set filled by values that no
// longer occur (a sweep's trials, old reasons) does not stop the sharing
// for good.
const Max = 1 << 14

// Strings holds one copy of each string it is given (up to Max). The zero
// value is ready; it is safe for concurrent use.
type Strings struct {
	mu  sync.Mutex
	set map[string]string
}

// Get returns the held string equal to s, holding s if none is.
func (in *Strings) Get(s string) string {
	if s == "" {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if held, ok := in.set[s]; ok {
		return held
	}
	if in.set == nil || len(in.set) >= Max {
		in.set = map[string]string{}
	}
	in.set[s] = s
	return s
}

package intern

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestGetSharesAndStartsAfresh: equal strings come back as one; past Max
// the set starts afresh, and new values are shared again.
func TestGetSharesAndStartsAfresh(t *testing.T) {
	t.Parallel()
	var in Strings
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }
	first := in.Get(strings.Clone("serving"))
	if again := in.Get(strings.Clone("serving")); !same(first, again) {
		t.Fatal("two equal strings were not shared")
	}
	for i := range Max {
		in.Get("filler-" + strconv.Itoa(i))
	}
	late := in.Get(strings.Clone("late"))
	if again := in.Get(strings.Clone("late")); !same(late, again) {
		t.Error("a value seen once the set was full is not shared")
	}
	if in.Get("") != "" {
		t.Error(`Get("") != ""`)
	}
}

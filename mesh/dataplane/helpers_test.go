package dataplane

import (
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"
	"time"
)

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func writeFiles(tb testing.TB, dir string, files map[string][]byte) {
	tb.Helper()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
}

// exec returns a command re-running this test binary as the puller of dir.
func exec(tb testing.TB, dir string) *osexec.Cmd {
	tb.Helper()
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envPuller+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s", d)
		}
		<-tick.C
	}
}

// panicTB lets the puller subprocess reuse the test helpers outside a test.
type panicTB struct{ testing.TB }

func (*panicTB) Helper()                      {}
func (*panicTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (*panicTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (*panicTB) Cleanup(func())               {}
func (*panicTB) TempDir() string              { panic("no temp dir in the puller") }

package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden parses every testdata/*.yaml: good-* files must parse, and
// their defaulted form must match the .golden JSON; bad-* files must fail,
// and their full error list must match the .golden text.
func TestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := Parse(filepath.Base(f), src)
			var got string
			switch {
			case strings.HasPrefix(filepath.Base(f), "good-"):
				if err != nil {
					t.Fatalf("good file fails:\n%v", err)
				}
				revalidate(t, docs)
				b := indentJSON(t, docs)
				got = string(b) + "\n"
			case strings.HasPrefix(filepath.Base(f), "bad-"):
				if err == nil {
					t.Fatal("bad file parses")
				}
				if _, ok := err.(ErrorList); !ok {
					t.Fatalf("error is %T, want ErrorList", err)
				}
				got = err.Error() + "\n"
			default:
				t.Fatalf("name testdata files good-* or bad-*")
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestExamples parses every examples/*.yaml: each must parse cleanly, and
// its defaulted form must match testdata/example-<name>.golden.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := Parse(filepath.Base(f), src)
			if err != nil {
				t.Fatalf("%s:\n%v", f, err)
			}
			revalidate(t, docs)
			b := indentJSON(t, docs)
			golden := filepath.Join("testdata", "example-"+strings.TrimSuffix(filepath.Base(f), ".yaml")+".golden")
			if *update {
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if diff := cmp.Diff(string(want), string(b)+"\n"); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestErrorsNamePosition(t *testing.T) {
	src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: a}\nspec:\n  model: {name: m}\n  resources:\n    memory: 12 parsecs\n"
	_, err := Parse("svc.yaml", []byte(src))
	el, ok := err.(ErrorList)
	if !ok || len(el) != 1 {
		t.Fatalf("err = %v", err)
	}
	want := &Error{File: "svc.yaml", Line: 7, Column: 13, Field: "spec.resources.memory", Msg: `invalid byte size "12 parsecs": want a number with an optional unit such as 512Mi or 16GiB`}
	if diff := cmp.Diff(want, el[0]); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestEmptyFile(t *testing.T) {
	if _, err := Parse("e.yaml", []byte("# nothing\n")); err == nil {
		t.Error("an empty file parses")
	}
}

func readFile(name string) ([]byte, error) { return os.ReadFile(name) }

// indentJSON renders v as the API would, indented, without HTML escapes.
func indentJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// revalidate checks that parsed (so defaulted) documents validate again:
// a default must never be an invalid value.
func revalidate(tb testing.TB, docs []*Document) {
	tb.Helper()
	for _, d := range docs {
		if err := d.Validate(); err != nil {
			tb.Errorf("%s after defaults: %v", d.Key(), err)
		}
	}
}

package arch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/strata-mesh/strata/"

// layerOf maps each package to its layer's index.
func layerOf() map[string]int {
	out := map[string]int{}
	for i, l := range Layers {
		for _, p := range l.Packages {
			out[p] = i
		}
	}
	return out
}

// check returns every edge of imports (package → its project imports)
// that Layers does not allow, and every package it does not list.
func check(imports map[string][]string) []string {
	at := layerOf()
	var bad []string
	for pkg, deps := range imports {
		from, ok := at[pkg]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is in no layer of arch.Layers", pkg))
			continue
		}
		for _, d := range deps {
			if to, ok := at[d]; ok && to >= from {
				bad = append(bad, fmt.Sprintf("%s (layer %d, %s) imports %s (layer %d, %s): a package imports only lower layers", pkg, from, Layers[from].What, d, to, Layers[to].What))
			}
		}
	}
	return bad
}

// TestImports checks every project import against Layers.
func TestImports(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages with")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		imports[pkg] = nil
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	if len(imports) < 20 {
		t.Fatalf("go list found %d packages; is the test run inside the module?", len(imports))
	}
	for _, b := range check(imports) {
		t.Error(b)
	}
}

// TestCheckFindsUpwardImports: the check itself refuses an import of a
// higher layer, one of the same layer, and an unlisted package.
func TestCheckFindsUpwardImports(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		imports map[string][]string
		want    string
	}{
		{map[string][]string{"placement": {"internal/httpapi"}}, "placement (layer 1"},
		{map[string][]string{"mesh": {"sim"}}, "mesh (layer 2"},
		{map[string][]string{"internal/newthing": nil}, "internal/newthing is in no layer"},
	} {
		bad := check(c.imports)
		if len(bad) != 1 || !strings.HasPrefix(bad[0], c.want) {
			t.Errorf("check(%v) = %q, want one problem starting %q", c.imports, bad, c.want)
		}
	}
	if bad := check(map[string][]string{"agent": {"internal/httpapi", "mesh"}}); len(bad) != 0 {
		t.Errorf("downward imports refused: %q", bad)
	}
}

// TestDocs: docs/architecture.md shows Layers as they are, between its
// layers markers.
func TestDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- layers: begin (internal/arch) -->\n", "<!-- layers: end -->"
	_, rest, ok1 := bytes.Cut(doc, []byte(begin))
	got, _, ok2 := bytes.Cut(rest, []byte(end))
	want := render()
	if !ok1 || !ok2 || string(got) != want {
		t.Errorf("docs/architecture.md's layers block is not arch.Layers; between the markers it should read:\n%s", want)
	}
}

// render is Layers as the docs show them: top layer first.
func render() string {
	var b strings.Builder
	b.WriteString("| layer | packages | what |\n|---|---|---|\n")
	for i := len(Layers) - 1; i >= 0; i-- {
		l := Layers[i]
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", i, strings.Join(l.Packages, "`, `"), l.What)
	}
	return b.String()
}

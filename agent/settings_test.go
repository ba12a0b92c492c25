package agent

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// The example configuration the .deb ships as
// /usr/share/doc/strata/agent.yaml.example, the .deb's own
// /etc/strata/agent.yaml, and the page that documents the settings.
const (
	exampleConfig = "../packaging/agent.yaml"
	debConfig     = "../packaging/deb/agent.yaml"
	agentDoc      = "../docs/agent.md"
)

// configKeys returns every key the config file accepts, with its field's
// type, as TestPackagedConfig and TestDocs name them: a nested one as
// parent.child (federation.listen), the keys of a list's items under the
// list's (gpus.model).
func configKeys() map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			name := yamlName(f)
			if name == "" {
				continue
			}
			key := prefix + name
			keys[key] = f.Type
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, key+".")
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return keys
}

// freeMap says whether what is under a key of this type is free-form
// (labels), not settings.
func freeMap(t reflect.Type) bool { return t.Kind() == reflect.Map }

// section says whether a key of this type only groups other keys
// (federation): it is no setting of its own.
func section(t reflect.Type) bool { return t.Kind() == reflect.Struct }

// yamlName is the key the YAML decoder reads f from, or "" when it reads
// none (yaml:"-", unexported).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return strings.ToLower(f.Name) // the decoder's rule for an untagged field
	}
	return name
}

// commentedSetting matches a setting commented out: "# key: value", also
// indented or as a list item ("#   - model: ..."). Prose comments must not
// start with "word:".
var commentedSetting = regexp.MustCompile(`^# ( *(- )?[a-z][a-z0-9_]*:( |$))`)

// uncomment returns src with its commented-out settings turned back on,
// line for line.
func uncomment(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if m := commentedSetting.FindStringSubmatchIndex(line); m != nil {
			line = line[m[2]:]
		}
		b.WriteString(line)
	}
	return b.String()
}

// fileKeys returns the keys of a YAML document, named as configKeys
// names them, with the line each is on; it does not look under the keys
// whose values are free-form maps.
func fileKeys(t *testing.T, src string, keys map[string]reflect.Type) map[string]int {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := prefix + n.Content[i].Value
				out[key] = n.Content[i].Line
				if typ, ok := keys[key]; !ok || !freeMap(typ) {
					walk(n.Content[i+1], key+".")
				}
			}
		}
	}
	walk(&doc, "")
	return out
}

// freshDefaults is the configuration a fresh agent runs with: DefaultConfig
// and EnsureDefaults, and the defaults that the packages a setting goes to
// give its zero value.
func freshDefaults() Config {
	d := DefaultConfig()
	d.EnsureDefaults()
	d.APIAnonymous = httpapi.DefaultAnonymous
	d.MaxConcurrentPulls = dataplane.DefaultConfig().MaxConcurrentPulls
	return d
}

// setting is one setting of a Config: its key, its value and a fresh
// agent's.
type setting struct {
	key      string
	got, def reflect.Value
}

// setValues returns every setting c sets: a field that is not its zero
// value (a list or map that is not nil), a struct's fields one by one.
func setValues(c Config) []setting {
	var out []setting
	var walk func(v, d reflect.Value, prefix string)
	walk = func(v, d reflect.Value, prefix string) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name := yamlName(f)
			if name == "" {
				continue
			}
			fv, dv := v.Field(i), d.Field(i)
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(fv, dv, prefix+name+".")
			case !fv.IsZero():
				out = append(out, setting{prefix + name, fv, dv})
			}
		}
	}
	walk(reflect.ValueOf(c), reflect.ValueOf(freshDefaults()), "")
	return out
}

// sameValue reports whether a and b are equal, counting an empty list or
// map equal to a nil one.
func sameValue(a, b reflect.Value) bool {
	empty := func(v reflect.Value) bool {
		return (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0
	}
	return empty(a) && empty(b) || reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestPackagedConfig: packaging/agent.yaml names every setting the config
// file accepts, set or commented out, and no other; it parses with the
// agent's loader, commented-out examples included; and every value it sets
// is the one a fresh agent uses without it. The .deb's own agent.yaml
// parses too.
func TestPackagedConfig(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	checkExampleConfig(t, exampleConfig, string(src))

	deb, err := os.ReadFile(debConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig(debConfig, []byte(uncomment(string(deb)))); err != nil {
		t.Errorf("%s with its commented-out settings turned on: %v", debConfig, err)
	}
}

// checkExampleConfig checks src, the example configuration named name, as
// TestPackagedConfig says.
func checkExampleConfig(t *testing.T, name, src string) {
	t.Helper()
	keys := configKeys()
	all := uncomment(src)
	if _, err := ParseConfig(name, []byte(all)); err != nil {
		t.Errorf("%s with its commented-out settings turned on: %v", name, err)
	}
	got := fileKeys(t, all, keys)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if _, ok := got[k]; !ok {
			t.Errorf("%s lacks %s: set it to its default, or comment it out with an example (# %s: ...)", name, k, k[strings.LastIndex(k, ".")+1:])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := keys[k]; !ok {
			t.Errorf("%s:%d: %s is not a setting of agent.Config", name, got[k], k)
		}
	}

	c, err := ParseConfig(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range setValues(c) {
		if !sameValue(s.got, s.def) {
			t.Errorf("%s sets %s: %s, but a fresh agent uses %s: write the default, or comment the setting out as an example", name, s.key, show(s.got), show(s.def))
		}
	}
}

// show formats a setting's value for a message: a string quoted, so that
// an empty one shows.
func show(v reflect.Value) string {
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprintf("%v", v.Interface())
}

// docKey is what the YAML key column of the settings table holds, between
// backquotes.
var docKey = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// TestDocs: docs/agent.md's settings table, between its settings markers,
// has one row for each key of the config file and no other (a section,
// such as federation, has none: its keys have theirs), and where
// packaging/agent.yaml sets a value, the row's default is that value.
func TestDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(agentDoc)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	checkDocs(t, agentDoc, string(doc), exampleConfig, string(src))
}

// checkDocs checks doc, the page named name, against the config struct and
// the example configuration src, as TestDocs says.
func checkDocs(t *testing.T, name, doc, srcName, src string) {
	t.Helper()
	const begin, end = "<!-- settings: begin (agent) -->\n", "<!-- settings: end -->"
	_, rest, ok1 := strings.Cut(doc, begin)
	table, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no settings table between %q and %q", name, begin, end)
	}
	defaults := map[string]string{} // key → its row's default cell
	rows := strings.Split(strings.TrimSpace(table), "\n")
	for _, line := range rows[min(2, len(rows)):] { // after the header and its rule
		line = strings.TrimSpace(line)
		// "| flag | key | default | meaning |"; "\|" is a | in a cell.
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if len(cells) != 6 || cells[0] != "" || cells[5] != "" {
			t.Errorf("%s: settings row %q: want | flag | YAML key | default | meaning |", name, line)
			continue
		}
		cell, def := strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])
		if cell == "" {
			continue // a flag with no key (-config)
		}
		key := strings.TrimSuffix(strings.TrimPrefix(cell, "`"), "`")
		if len(key)+2 != len(cell) || !docKey.MatchString(key) {
			t.Errorf("%s: settings row %q: the YAML key column holds one key, as `key` (or `parent.child`)", name, line)
			continue
		}
		if _, dup := defaults[key]; dup {
			t.Errorf("%s: %s has two rows", name, key)
		}
		defaults[key] = strings.ReplaceAll(def, "\x00", `\|`)
	}

	keys := configKeys()
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if _, ok := defaults[k]; !ok && !section(keys[k]) {
			t.Errorf("%s's settings table has no row for %s", name, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(defaults)) {
		if typ, ok := keys[k]; !ok || section(typ) {
			t.Errorf("%s's settings table has a row for %s, which is not a setting of agent.Config", name, k)
		}
	}

	c, err := ParseConfig(srcName, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range setValues(c) {
		def, ok := defaults[s.key]
		if !ok {
			continue
		}
		v := reflect.New(s.got.Type())
		if err := yaml.Unmarshal([]byte(strings.Trim(def, "`")), v.Interface()); err != nil || !sameValue(v.Elem(), s.got) {
			t.Errorf("%s gives %s the default %q, but %s sets it to %s", name, s.key, def, srcName, show(s.got))
		}
	}
}

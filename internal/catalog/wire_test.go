package catalog_test

import (
	"encoding"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// wireGolden pins the JSON schema of every record kind.
const wireGolden = "testdata/wire.golden"

// TestWireSchema pins the JSON schema of every record the catalog
// gossips and persists: each table's value type, and the lineage that
// model manifests carry. Other agent versions read these records, so a
// renamed tag or a changed type anywhere under them (also in a type of
// another package) must be a deliberate change of testdata/wire.golden
// (go test -run TestWireSchema -update), not a side effect.
func TestWireSchema(t *testing.T) {
	got := wireSchema(catalog.New(catalogtest.NewStore(), nil))
	if *update {
		if err := os.WriteFile(wireGolden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(wireGolden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	added, removed := setDiff(got, want), setDiff(want, got)
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "the catalog's wire schema is not %s: other agent versions read these records.\n", wireGolden)
	for _, p := range removed {
		fmt.Fprintf(&msg, "  removed: %s\n", p)
	}
	for _, p := range added {
		fmt.Fprintf(&msg, "  added:   %s\n", p)
	}
	msg.WriteString("If the change is meant (and old records still read), rewrite it: go test -run TestWireSchema -update")
	t.Error(msg.String())
}

// TestWireSchemaCoversTables: the schema lists every table of Catalog, so
// that a table added later is pinned too.
func TestWireSchemaCoversTables(t *testing.T) {
	c := catalog.New(catalogtest.NewStore(), nil)
	kinds := map[string]bool{}
	for _, line := range wireSchema(c) {
		kind, _, _ := strings.Cut(line, ":")
		kinds[kind] = true
	}
	for name := range tables(c) {
		if !kinds[name] {
			t.Errorf("table %s has no paths in the wire schema", name)
		}
	}
}

// wireSchema lists "kind: path jsonkind" for every record kind, sorted.
func wireSchema(c *catalog.Catalog) []string {
	var out []string
	add := func(kind string, t reflect.Type) {
		for _, p := range jsonPaths(t, "", nil) {
			out = append(out, kind+": "+p)
		}
	}
	for name, t := range tables(c) {
		add(name, t)
	}
	// Not a table: the JSON a trained model's signed manifest carries
	// under catalog.MetaLineage.
	add("manifest-lineage", reflect.TypeFor[catalog.Lineage]())
	slices.Sort(out)
	return out
}

// tables yields each table of c by name, with its value type: every
// exported *Table[T] field of Catalog.
func tables(c *catalog.Catalog) func(func(string, reflect.Type) bool) {
	return func(yield func(string, reflect.Type) bool) {
		v := reflect.ValueOf(c).Elem()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Type.Kind() != reflect.Pointer ||
				!strings.HasPrefix(f.Type.Elem().Name(), "Table[") {
				continue
			}
			tab := v.Field(i)
			name := tab.MethodByName("Name").Call(nil)[0].String()
			// Key(v T) string: its argument is the table's value type.
			value := tab.MethodByName("Key").Type().In(0)
			if !yield(name, value) {
				return
			}
		}
	}
}

var (
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// jsonPaths lists the JSON paths of t under prefix ("nodes[].name",
// "metrics{}"), each with its JSON kind, as encoding/json writes t.
func jsonPaths(t reflect.Type, prefix string, seen []reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	leaf := func(kind string) []string {
		if prefix == "" {
			return []string{"(value) " + kind}
		}
		return []string{prefix + " " + kind}
	}
	switch {
	case t == timeType:
		return leaf("string")
	case t == rawType:
		return leaf("any")
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler):
		return leaf("marshaler(" + t.String() + ")")
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return leaf("string")
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return leaf("bytes")
		}
		return jsonPaths(t.Elem(), prefix+"[]", seen)
	case reflect.Map:
		return jsonPaths(t.Elem(), prefix+"{}", seen)
	case reflect.Struct:
	case reflect.Bool:
		return leaf("bool")
	case reflect.String:
		return leaf("string")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Uint8:
		return leaf("number")
	case reflect.Interface:
		return leaf("any")
	default:
		return leaf(t.Kind().String())
	}
	if slices.Contains(seen, t) {
		return leaf("recursive(" + t.String() + ")")
	}
	seen = append(seen, t)
	var out []string
	for _, f := range jsonFields(t) {
		p := f.name
		if prefix != "" {
			p = prefix + "." + f.name
		}
		out = append(out, jsonPaths(f.typ, p, seen)...)
	}
	if len(out) == 0 {
		return leaf("{}")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// field is one JSON object member of a struct.
type field struct {
	name   string
	typ    reflect.Type
	depth  int
	tagged bool
}

// jsonFields lists the members encoding/json writes for struct t:
// exported fields by their tag's name, embedded untagged structs
// flattened, and of several fields of one name the shallowest (then the
// only tagged one) kept, none when that is ambiguous.
func jsonFields(t reflect.Type) []field {
	var all []field
	var walk func(t reflect.Type, depth int, visited []reflect.Type)
	walk = func(t reflect.Type, depth int, visited []reflect.Type) {
		if slices.Contains(visited, t) {
			return
		}
		visited = append(visited, t)
		for i := range t.NumField() {
			f := t.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous {
				if !f.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "" && f.Anonymous && ft.Kind() == reflect.Struct {
				walk(ft, depth+1, visited)
				continue
			}
			tagged := name != ""
			if !tagged {
				name = f.Name
			}
			all = append(all, field{name: name, typ: f.Type, depth: depth, tagged: tagged})
		}
	}
	walk(t, 0, nil)
	var out []field
	for _, f := range all {
		if slices.ContainsFunc(out, func(o field) bool { return o.name == f.name }) {
			continue
		}
		var rivals []field
		for _, g := range all {
			if g.name == f.name {
				rivals = append(rivals, g)
			}
		}
		if w, ok := dominant(rivals); ok {
			out = append(out, w)
		}
	}
	return out
}

// dominant is encoding/json's choice among fields of one name.
func dominant(fs []field) (field, bool) {
	least := slices.MinFunc(fs, func(a, b field) int { return a.depth - b.depth })
	var top []field
	for _, f := range fs {
		if f.depth == least.depth {
			top = append(top, f)
		}
	}
	if len(top) == 1 {
		return top[0], true
	}
	var tagged []field
	for _, f := range top {
		if f.tagged {
			tagged = append(tagged, f)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return field{}, false
}

// setDiff lists the lines of a that b lacks.
func setDiff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestJSONPathsMatchEncoding checks the walker against encoding/json: a
// value of each record kind with every field filled marshals to exactly
// the paths and kinds that jsonPaths lists.
func TestJSONPathsMatchEncoding(t *testing.T) {
	c := catalog.New(catalogtest.NewStore(), nil)
	kinds := map[string]reflect.Type{"manifest-lineage": reflect.TypeFor[catalog.Lineage]()}
	for name, typ := range tables(c) {
		kinds[name] = typ
	}
	for name, typ := range kinds {
		v := reflect.New(typ).Elem()
		fill(v, nil)
		b, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := valuePaths(doc, "")
		slices.Sort(got)
		var want []string
		for _, p := range jsonPaths(typ, "", nil) {
			want = append(want, strings.Replace(p, " bytes", " string", 1))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: encoding/json writes\n\t%s\nbut jsonPaths lists\n\t%s", name,
				strings.Join(setDiff(got, want), "\n\t"), strings.Join(setDiff(want, got), "\n\t"))
		}
	}
}

// fill sets every field under v to a value that encoding/json writes even
// with omitempty: each slice and map gets one element (a map's key is
// "{}", so that it reads as jsonPaths writes a map).
func fill(v reflect.Value, seen []reflect.Type) {
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if slices.Contains(seen, v.Type()) {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), append(seen, v.Type()))
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f, seen)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), seen)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k := reflect.New(v.Type().Key()).Elem()
		k.SetString("{}")
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, seen)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	}
}

// valuePaths lists the paths and kinds of a decoded JSON document, as
// jsonPaths writes them.
func valuePaths(doc any, prefix string) []string {
	switch d := doc.(type) {
	case map[string]any:
		var out []string
		for k, e := range d {
			p := prefix + "." + k
			switch {
			case k == "{}":
				p = prefix + "{}"
			case prefix == "":
				p = k
			}
			out = append(out, valuePaths(e, p)...)
		}
		return out
	case []any:
		return valuePaths(d[0], prefix+"[]")
	case string:
		return []string{prefix + " string"}
	case float64:
		return []string{prefix + " number"}
	case bool:
		return []string{prefix + " bool"}
	}
	return []string{prefix + " null"}
}

package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// scalarParser is a type written as one YAML scalar with units.
type scalarParser interface{ parseScalar(string) error }

var (
	scalarParserType = reflect.TypeOf((*scalarParser)(nil)).Elem()
	exprPtrType      = reflect.TypeOf((*Expr)(nil))
	yamlLineRE       = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

// Parse reads every policy document in a YAML file (documents separated by
// ---), strictly: unknown fields, duplicate keys, wrong types, bad units,
// impossible values, CEL errors and names defined twice are all reported
// at once, in file order, each with file:line:column and the field's path,
// as an ErrorList. Documents come back validated and defaulted, with their
// expressions compiled, in file order.
func Parse(file string, data []byte) ([]*Document, error) {
	var docs []*Document
	var errs ErrorList
	dec := yaml.NewDecoder(bytes.NewReader(data))
	lines := strings.Split(string(data), "\n")
	seps := separators(lines)
	seen := map[string]Position{}
	for {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, syntaxError(file, err))
			break // the decoder cannot resync after a syntax error
		}
		if len(root.Content) == 0 {
			continue // an empty document between separators
		}
		d := &decoder{file: file, pos: map[string]Position{}, lines: lines, seps: seps}
		doc := d.document(root.Content[0])
		if doc != nil {
			doc.pos = d.pos
			d.validate(doc)
			doc.SetDefaults()
			if doc.Metadata.Name != "" {
				at := d.at("metadata.name")
				if p, dup := seen[doc.Key()]; dup {
					d.errAt(at, "metadata.name", fmt.Sprintf("%s is defined twice in this file (first at line %d)", doc.Key(), p.Line))
				} else {
					seen[doc.Key()] = at
				}
			}
		}
		errs = append(errs, d.errs...)
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(errs) > 0 {
		return nil, errs.sorted()
	}
	if len(docs) == 0 {
		return nil, ErrorList{{File: file, Line: 1, Column: 1, Msg: "no policy documents in the file"}}
	}
	return docs, nil
}

// parserProblems are yaml.v3's parser (not scanner) messages: for these
// it reports the 0-based line where the unfinished construct started, so
// the error points at that construct's line.
var parserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"did not find expected '-' indicator", "did not find expected <document start>",
	"did not find expected key", "did not find expected node content",
	"found duplicate %", "found incompatible YAML document", "found undefined tag handle",
}

func syntaxError(file string, err error) *Error {
	msg := err.Error()
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		for _, p := range parserProblems {
			if strings.HasPrefix(msg, p) {
				line++
				break
			}
		}
	}
	return &Error{File: file, Line: line, Column: 1, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

// keySuffix marks the position of a map key (rather than its value) in
// decoder.pos, for errors about the key itself.
const keySuffix = "#key"

// decoder turns one document's YAML tree into typed values, recording
// every problem with its position and where each field was.
type decoder struct {
	file   string
	errs   ErrorList
	pos    map[string]Position // field path → position of its value
	failed map[string]bool     // field paths that already have an error
	lines  []string            // the file, to place errors inside expressions
	seps   []int               // 1-based lines of document markers (---, ...)
}

var markerRE = regexp.MustCompile(`^(---|\.\.\.)(\s|$)`)

// separators lists the lines that start or end a YAML document.
func separators(lines []string) []int {
	var out []int
	for i, l := range lines {
		if markerRE.MatchString(l) {
			out = append(out, i+1)
		}
	}
	return out
}

// source returns the document's own text as written in the file — the
// lines between the markers around its first node, comments included —
// so a stored policy keeps its author's form. It falls back to the
// re-encoded node if the file's text cannot be told apart.
func (d *decoder) source(n *yaml.Node) string {
	start, end := 1, len(d.lines)+1 // [start, end), 1-based
	for _, s := range d.seps {
		if s < n.Line {
			start = s + 1
		} else if s > n.Line {
			end = s
			break
		}
	}
	if start <= end && end-1 <= len(d.lines) && start >= 1 {
		text := strings.Join(d.lines[start-1:end-1], "\n")
		if strings.TrimSpace(text) != "" {
			return strings.TrimRight(text, "\n") + "\n"
		}
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return ""
	}
	return string(b)
}

func posOf(n *yaml.Node) Position { return Position{Line: n.Line, Column: n.Column} }

func (d *decoder) errAt(p Position, field, msg string) {
	if d.failed == nil {
		d.failed = map[string]bool{}
	}
	if d.failed[field] && field != "" {
		return // one error per field: the first says what is wrong
	}
	d.failed[field] = true
	d.errs = append(d.errs, &Error{File: d.file, Line: p.Line, Column: p.Column, Field: field, Msg: msg})
}

func (d *decoder) errNode(n *yaml.Node, field, msg string) { d.errAt(posOf(n), field, msg) }

// at returns the position of path, or of its closest recorded parent.
func (d *decoder) at(path string) Position {
	for p := path; ; {
		if pos, ok := d.pos[p]; ok {
			return pos
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return d.pos[""]
		}
		p = p[:i]
	}
}

func (d *decoder) errField(path, msg string) { d.errAt(d.at(path), path, msg) }

// document decodes apiVersion, kind, metadata and the spec of its kind.
func (d *decoder) document(n *yaml.Node) *Document {
	d.pos[""] = posOf(n)
	if n.Kind != yaml.MappingNode {
		d.errNode(n, "", "a policy document must be a mapping with apiVersion, kind, metadata and spec")
		return nil
	}
	doc := &Document{File: d.file, Pos: posOf(n)}
	doc.Source = d.source(n)
	var specNode *yaml.Node
	keys := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if keys[k.Value] {
			d.errNode(k, k.Value, "duplicate field")
			continue
		}
		keys[k.Value] = true
		d.pos[k.Value] = posOf(v)
		switch k.Value {
		case "apiVersion":
			d.decode(v, reflect.ValueOf(&doc.APIVersion).Elem(), "apiVersion")
		case "kind":
			d.decode(v, reflect.ValueOf(&doc.Kind).Elem(), "kind")
		case "metadata":
			d.decode(v, reflect.ValueOf(&doc.Metadata).Elem(), "metadata")
		case "spec":
			specNode = v
		default:
			d.errNode(k, k.Value, "unknown field (a document has apiVersion, kind, metadata and spec)")
		}
	}
	for _, f := range []string{"apiVersion", "kind", "metadata", "spec"} {
		if !keys[f] {
			d.errNode(n, f, "required field is missing")
		}
	}
	switch doc.Kind {
	case KindInferenceService:
		doc.InferenceService = &InferenceServiceSpec{}
		if specNode != nil {
			d.decode(specNode, reflect.ValueOf(doc.InferenceService).Elem(), "spec")
		}
	case KindTrainingJob:
		doc.TrainingJob = &TrainingJobSpec{}
		if specNode != nil {
			d.decode(specNode, reflect.ValueOf(doc.TrainingJob).Elem(), "spec")
		}
	default:
		if keys["kind"] {
			d.errField("kind", fmt.Sprintf("%q is not a policy kind: use %s or %s", doc.Kind, KindInferenceService, KindTrainingJob))
		}
		return nil
	}
	return doc
}

// yamlFields maps a struct's YAML names to field indexes.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	m := map[string]int{}
	var names []string
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		m[name] = i
		names = append(names, name)
	}
	return m, names
}

// decode fills v from n, strictly.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an explicit null leaves the default
	}
	d.pos[path] = posOf(n)
	if v.Type() == exprPtrType {
		if n.Kind != yaml.ScalarNode {
			d.errNode(n, path, "want a CEL expression as a string")
			return
		}
		v.Set(reflect.ValueOf(&Expr{src: strings.TrimRight(n.Value, "\n"), pos: posOf(n), loc: d.exprLoc(n)}))
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(scalarParserType) {
		if n.Kind != yaml.ScalarNode {
			d.errNode(n, path, "want a single value")
			return
		}
		if err := v.Addr().Interface().(scalarParser).parseScalar(n.Value); err != nil {
			d.errNode(n, path, err.Error())
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.errNode(n, path, "want a mapping of fields")
			return
		}
		fields, names := yamlFields(v.Type())
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			fp := join(path, k.Value)
			if seen[k.Value] {
				d.errNode(k, fp, "duplicate field")
				continue
			}
			seen[k.Value] = true
			idx, ok := fields[k.Value]
			if !ok {
				d.errNode(k, fp, fmt.Sprintf("unknown field (known: %s)", strings.Join(names, ", ")))
				continue
			}
			d.decode(val, v.Field(idx), fp)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errNode(n, path, "want a list")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.errNode(n, path, "want a mapping")
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				d.errNode(k, join(path, k.Value), "duplicate key")
				continue
			}
			e := reflect.New(v.Type().Elem()).Elem()
			d.pos[join(path, k.Value)+keySuffix] = posOf(k)
			d.decode(val, e, join(path, k.Value))
			m.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		v.Set(m)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errNode(n, path, "want a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
			d.errNode(n, path, fmt.Sprintf("want a whole number, got %q", n.Value))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(n.Value, 64)
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || err != nil {
			d.errNode(n, path, fmt.Sprintf("want a number, got %q", n.Value))
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.errNode(n, path, fmt.Sprintf("want true or false, got %q", n.Value))
			return
		}
		v.SetBool(strings.EqualFold(n.Value, "true"))
	default:
		d.errNode(n, path, "unsupported field type "+v.Type().String())
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// exprLoc works out how a scalar's text lies in the file, so errors inside
// a CEL expression can point at their own column. It only claims columns
// it has checked against the file's text.
func (d *decoder) exprLoc(n *yaml.Node) exprLoc {
	line := func(i int) ([]rune, bool) { // 1-based
		if i < 1 || i > len(d.lines) {
			return nil, false
		}
		return []rune(strings.TrimSuffix(d.lines[i-1], "\r")), true
	}
	hasAt := func(l []rune, col0 int, s string) bool { // col0 0-based
		return col0 >= 0 && col0 <= len(l) && strings.HasPrefix(string(l[col0:]), s)
	}
	switch n.Style {
	case 0, yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if strings.Contains(n.Value, "\n") {
			return exprLoc{}
		}
		l, ok := line(n.Line)
		start := n.Column // 1-based column of the first character of the value
		if n.Style != 0 {
			start++ // skip the quote
		}
		if !ok || !hasAt(l, start-1, n.Value) {
			return exprLoc{} // escapes or folding: columns do not line up
		}
		return exprLoc{mappable: true, col0: start}
	case yaml.LiteralStyle:
		vl := strings.Split(strings.TrimRight(n.Value, "\n"), "\n")
		indent := -1
		for k, text := range vl {
			l, ok := line(n.Line + 1 + k)
			if !ok {
				return exprLoc{}
			}
			if text == "" {
				continue
			}
			if indent < 0 {
				indent = len(l) - len([]rune(strings.TrimLeft(string(l), " ")))
			}
			if !hasAt(l, indent, text) {
				return exprLoc{}
			}
		}
		if indent < 0 {
			return exprLoc{}
		}
		return exprLoc{mappable: true, block: true, first: n.Line + 1, indent: indent}
	}
	return exprLoc{}
}

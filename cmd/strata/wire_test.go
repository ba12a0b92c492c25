package main

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/sim"
	"github.com/strata-mesh/strata/storage"
)

// TestWireTypes checks that package api's types carry every JSON field
// the agent sends, so that a field added to an answer fails here rather
// than vanishing from what api/client returns.
func TestWireTypes(t *testing.T) {
	tests := []struct {
		name      string
		agent, pb any
	}{
		{"member", mesh.Member{}, api.Member{}},
		{"site", mesh.Site{}, api.Site{}},
		{"node", mesh.Node{}, api.Node{}},
		{"policy", agent.PolicyRecord{}, api.Policy{}},
		{"apply", agent.ApplyResult{}, api.ApplyResult{}},
		{"plan", agent.PlanResult{}, api.PlanResult{}},
		{"policy error", agent.PolicyError{}, api.PolicyError{}},
		{"placement", agent.PlacementStatus{}, api.PlacementStatus{}},
		{"manifest", storage.Manifest{}, api.Manifest{}},
		{"artifact", agent.ArtifactInfo{}, api.Artifact{}},
		{"model", agent.ModelInfo{}, api.Model{}},
		{"transfer", dataplane.TransferStatus{}, api.TransferStatus{}},
		{"job", agent.JobRecord{}, api.Job{}},
		{"drift", agent.DriftRecord{}, api.Drift{}},
		{"event", agent.Event{}, api.Event{}},
		{"lineage", agent.LineageChain{}, api.LineageChain{}},
		{"experiment", agent.ExperimentRecord{}, api.Experiment{}},
		{"what-if", sim.WhatIfReport{}, api.WhatIfReport{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := jsonPaths(reflect.TypeOf(tt.agent), "", nil)
			got := jsonPaths(reflect.TypeOf(tt.pb), "", nil)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("JSON fields of %T vs %T (-agent +api):\n%s", tt.agent, tt.pb, diff)
			}
		})
	}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// jsonPaths lists the JSON field paths of t ("capabilities.gpus[].model"),
// sorted, with each leaf's JSON kind.
func jsonPaths(t reflect.Type, prefix string, seen []reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return []string{prefix + ": marshaler"}
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return []string{prefix + ": bytes"}
		}
		return jsonPaths(t.Elem(), prefix+"[]", seen)
	case reflect.Map:
		return jsonPaths(t.Elem(), prefix+"{}", seen)
	case reflect.Struct:
	default:
		return []string{prefix + ": " + kindName(t.Kind())}
	}
	if slices.Contains(seen, t) {
		return []string{prefix + ": recursive"}
	}
	seen = append(seen, t)
	var out []string
	for f := range fields(t) {
		name, inline := jsonName(f)
		switch {
		case name == "-":
		case inline:
			out = append(out, jsonPaths(f.Type, prefix, seen)...)
		default:
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			out = append(out, jsonPaths(f.Type, p, seen)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// fields yields the exported fields of a struct and its embedded ones.
func fields(t reflect.Type) func(func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			if !yield(f) {
				return
			}
		}
	}
}

// jsonName is a field's JSON name, and whether it is an embedded struct
// whose fields encoding/json inlines.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "" && f.Anonymous {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			return "", true
		}
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	}
	return k.String()
}

package mesh

import (
	"fmt"
	"strconv"
	"strings"
)

// Schema is the version of what agents replicate to one another: catalog
// entries and node documents. Every entry and document carries its
// writer's schema. Within one major version an agent reads what any minor
// wrote, ignoring fields it does not know; a minor adds fields or values
// an older agent does not act on. An agent does not read an entry of
// another major. A feature whose records an older agent would misread is
// gated: it is refused until every live member reports the minor that
// brings it (see OldestSchema).
type Schema struct {
	Major, Minor int
}

// Schemas this build knows. What each minor brought:
//
//	1.0  every agent before schemas were recorded (no "schema" field)
//	1.1  code artifacts (kind code); TrainingJob code, launcher torchrun,
//	     gang.ranksPerNode
//	1.2  node documents carry traffic (each served model's load)
//	1.3  traffic by client site; autoscale per client site (placement
//	     records' scale.sites)
var (
	SchemaBase    = Schema{1, 0}
	CurrentSchema = Schema{1, 3}
)

// ParseSchema reads "MAJOR.MINOR"; "" is SchemaBase (written before
// schemas were recorded).
func ParseSchema(s string) (Schema, error) {
	if s == "" {
		return SchemaBase, nil
	}
	maj, min, ok := strings.Cut(s, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
		return Schema{}, fmt.Errorf("mesh: schema %q: want MAJOR.MINOR", s)
	}
	return Schema{a, b}, nil
}

func (s Schema) String() string { return fmt.Sprintf("%d.%d", s.Major, s.Minor) }

// Less orders schemas.
func (s Schema) Less(o Schema) bool {
	return s.Major < o.Major || (s.Major == o.Major && s.Minor < o.Minor)
}

// Reads says whether an agent of schema s reads what one of schema w
// wrote: the same major.
func (s Schema) Reads(w Schema) bool { return s.Major == w.Major }

// SchemaError is an entry or document written at a schema this agent does
// not read.
type SchemaError struct {
	Key    string
	Schema string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("%s was written at schema %s, and this agent (schema %s) reads only %d.x: upgrade it", e.Key, e.Schema, CurrentSchema, CurrentSchema.Major)
}

// CheckSchema returns a *SchemaError when this agent does not read what
// was written at schema s (a malformed schema included).
func CheckSchema(key, s string) error {
	w, err := ParseSchema(s)
	if err != nil || !CurrentSchema.Reads(w) {
		return &SchemaError{Key: key, Schema: s}
	}
	return nil
}

// OldestSchema returns the lowest schema among the live nodes (alive or
// suspect; pass Mesh.Nodes, this node included) and the names of those
// that report it. A gated feature is refused while it is older than the
// feature's schema. A failed node is not counted: if it comes back at an
// older schema, it may refuse what the gate let through meanwhile (a
// policy field it does not know), so upgrade it before it returns.
func OldestSchema(nodes []Node) (Schema, []string) {
	oldest := CurrentSchema
	var names []string
	for _, n := range nodes {
		if n.Status != StatusAlive && n.Status != StatusSuspect {
			continue
		}
		s, err := ParseSchema(n.Schema)
		if err != nil {
			continue // not a schema this build can compare; CheckSchema refuses its entries
		}
		switch {
		case s.Less(oldest):
			oldest, names = s, []string{n.Name}
		case s == oldest:
			names = append(names, n.Name)
		}
	}
	return oldest, names
}

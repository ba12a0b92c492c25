package placement_test

import (
	"fmt"

	"github.com/strata-mesh/strata/policy"
)

// matchFunc is a Constraint made of a Go func, standing in for CEL.
type matchFunc struct {
	expr string
	f    func(*policy.Node) (bool, error)
}

func (m matchFunc) Match(n *policy.Node) (bool, error) { return m.f(n) }
func (m matchFunc) String() string                     { return m.expr }

// scoreFunc is a Scorer made of a Go func, standing in for CEL.
type scoreFunc struct {
	expr string
	f    func(*policy.Node) (float64, error)
}

func (s scoreFunc) Score(n *policy.Node) (float64, error) { return s.f(n) }
func (s scoreFunc) String() string                        { return s.expr }

// classMatch is a matchFunc that declares the node fields it reads, so the
// engine answers it once per node class.
type classMatch struct {
	matchFunc
	fields []string
}

func (m classMatch) NodeFields() []string { return m.fields }

// classScore is a scoreFunc that declares the node fields it reads.
type classScore struct {
	scoreFunc
	fields []string
}

func (s classScore) NodeFields() []string { return s.fields }

func labelIs(key, value string) classMatch {
	return classMatch{fields: []string{"labels"}, matchFunc: matchFunc{
		expr: fmt.Sprintf("node.labels[%q] == %q", key, value),
		f: func(n *policy.Node) (bool, error) {
			v, ok := n.Labels[key]
			if !ok {
				return false, fmt.Errorf("no such key: %s", key)
			}
			return v == value, nil
		},
	}}
}

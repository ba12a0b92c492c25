package httpapi

import (
	"errors"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/policy"
)

// parsePolicies parses a file of policy documents into records, one per
// document, each holding its own YAML.
func parsePolicies(file string, data []byte) ([]catalog.Policy, error) {
	docs, err := policy.Parse(file, data)
	if err != nil {
		return nil, err
	}
	var out []catalog.Policy
	for _, d := range docs {
		out = append(out, catalog.Policy{Kind: d.Kind, Name: d.Metadata.Name, Source: d.Source, File: file})
	}
	return out, nil
}

// policyErrors lists err's positioned problems.
func policyErrors(err error) []PolicyError {
	var el policy.ErrorList
	if !errors.As(err, &el) {
		return nil
	}
	out := make([]PolicyError, 0, len(el))
	for _, e := range el {
		out = append(out, PolicyError{File: e.File, Line: e.Line, Column: e.Column, Field: e.Field, Message: e.Msg})
	}
	return out
}

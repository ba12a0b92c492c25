package agent

import (
	"errors"

	"github.com/strata-mesh/strata/placement"
)

// parsePolicies parses a file of policy documents into records.
func parsePolicies(file string, data []byte) ([]PolicyRecord, error) {
	return nil, errors.New("not yet: policies are not parsed yet")
}

// policyErrors lists err's positioned problems.
func policyErrors(err error) []PolicyError { return nil }

// requestFor turns an applied policy into a placement request.
func requestFor(p PolicyRecord) (*placement.Request, error) {
	return nil, errors.New("not yet: policies are not compiled yet")
}

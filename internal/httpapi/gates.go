package httpapi

import (
	"fmt"
	"strings"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// GateError refuses a feature that an agent of an older schema would
// misread (an older agent parses policies strictly and refuses a field it
// does not know, and checks artifact kinds) while a live member still runs
// one: during a rolling upgrade, the feature waits for the last member.
type GateError struct {
	// Field is the policy field or request parameter that uses the
	// feature; What names it.
	Field, What string
	Need        mesh.Schema
	Oldest      mesh.Schema
	// Members run Oldest.
	Members []string
}

func (e *GateError) Error() string {
	return fmt.Sprintf("%s: %s needs every agent at schema %s or newer, and %s %s %s: finish upgrading the mesh first",
		e.Field, e.What, e.Need, strings.Join(e.Members, ", "), plural(len(e.Members), "runs", "run"), e.Oldest)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// schema11 brought code artifacts, TrainingJob code, torchrun and
// ranks per node.
var schema11 = mesh.Schema{Major: 1, Minor: 1}

// schema12 brought traffic reports, InferenceService autoscale, burst
// and prestage (standbys in placement records).
var schema12 = mesh.Schema{Major: 1, Minor: 2}

// schema13 brought traffic by client site and autoscale per client
// site.
var schema13 = mesh.Schema{Major: 1, Minor: 3}

// policyGate returns a *GateError when doc uses a field or value that not
// every live node reads yet.
func policyGate(doc *policy.Document, nodes []mesh.Node) error {
	oldest, members := mesh.OldestSchema(nodes)
	if !oldest.Less(schema13) {
		return nil
	}
	if s := doc.InferenceService; s != nil && s.Autoscale != nil && s.PerClientSite {
		// An older agent refuses the policy, and an older owner would
		// neither count load by site nor place by site's count.
		return &GateError{Field: "spec.autoscale", What: "autoscale with perClientSite", Need: schema13, Oldest: oldest, Members: members}
	}
	if !oldest.Less(schema12) {
		return nil
	}
	if doc.InferenceService != nil && doc.Wrote("spec.autoscale") {
		return &GateError{Field: "spec.autoscale", What: "autoscale", Need: schema12, Oldest: oldest, Members: members}
	}
	if doc.InferenceService != nil && doc.Wrote("spec.burst") {
		return &GateError{Field: "spec.burst", What: "burst", Need: schema12, Oldest: oldest, Members: members}
	}
	if doc.InferenceService != nil && doc.Wrote("spec.prestage") {
		return &GateError{Field: "spec.prestage", What: "prestage", Need: schema12, Oldest: oldest, Members: members}
	}
	if !oldest.Less(schema11) {
		return nil
	}
	gate := func(field, what string) error {
		return &GateError{Field: field, What: what, Need: schema11, Oldest: oldest, Members: members}
	}
	if tj := doc.TrainingJob; tj != nil {
		switch {
		case doc.Wrote("spec.code"):
			return gate("spec.code", "a job's code artifact")
		case tj.Launcher == policy.LauncherTorchrun:
			return gate("spec.launcher", "launcher torchrun")
		case doc.Wrote("spec.gang.ranksPerNode"):
			return gate("spec.gang.ranksPerNode", "ranks per node")
		}
	}
	return nil
}

// pushGate returns a *GateError when an artifact of kind is one that not
// every live node reads yet.
func pushGate(kind storage.Kind, nodes []mesh.Node) error {
	oldest, members := mesh.OldestSchema(nodes)
	if kind == storage.KindCode && oldest.Less(schema11) {
		return &GateError{Field: "kind", What: "a code artifact", Need: schema11, Oldest: oldest, Members: members}
	}
	return nil
}

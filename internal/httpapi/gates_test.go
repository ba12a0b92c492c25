package httpapi

import (
	"errors"
	"testing"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// TestGates: a policy or push that uses what schema 1.1, 1.2 or 1.3 brought
// is refused while a live member runs an older schema (no schema
// recorded), with the field and the members named; a failed member does
// not hold it back.
func TestGates(t *testing.T) {
	t.Parallel()
	node := func(name, schema string, st mesh.Status) mesh.Node {
		n := mesh.Node{Status: st}
		n.Name, n.Schema = name, schema
		return n
	}
	upgraded := []mesh.Node{node("a", "1.3", mesh.StatusAlive), node("b", "1.3", mesh.StatusSuspect), node("c", "", mesh.StatusFailed)}
	mixed := []mesh.Node{node("a", "1.1", mesh.StatusAlive), node("b", "", mesh.StatusAlive), node("c", "", mesh.StatusSuspect)}
	job := func(spec string) *policy.Document {
		docs, err := policy.Parse("job.yaml", []byte("apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: j}\nspec:\n"+spec))
		if err != nil {
			t.Fatal(err)
		}
		return docs[0]
	}
	service := func(spec string) *policy.Document {
		docs, err := policy.Parse("svc.yaml", []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n"+spec))
		if err != nil {
			t.Fatal(err)
		}
		return docs[0]
	}
	for _, c := range []struct {
		name string
		doc  *policy.Document
		want string
	}{
		{"fixed replicas", service("  replicas: 2\n"), ""},
		{"autoscale", service("  autoscale: {max: 4, target: {rps: 50}}\n"),
			"spec.autoscale: autoscale needs every agent at schema 1.2 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"autoscale per client site", service("  perClientSite: true\n  latency: {p99: 20ms, clients: [a]}\n  autoscale: {max: 4, target: {rps: 50}}\n"),
			"spec.autoscale: autoscale with perClientSite needs every agent at schema 1.3 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"burst", service("  latency: {p99: 20ms, clients: [a]}\n  burst: {tiers: [cloud]}\n"),
			"spec.burst: burst needs every agent at schema 1.2 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"prestage", service("  prestage: true\n"),
			"spec.prestage: prestage needs every agent at schema 1.2 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"exec", job("  command: [python3, train.py]\n"), ""},
		{"code", job("  command: [python3, train.py]\n  code: ddp\n"),
			"spec.code: a job's code artifact needs every agent at schema 1.1 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"torchrun", job("  launcher: torchrun\n  command: [train.py]\n"),
			"spec.launcher: launcher torchrun needs every agent at schema 1.1 or newer, and b, c run 1.0: finish upgrading the mesh first"},
		{"ranks", job("  command: [python3, train.py]\n  resources: {gpus: {count: 2}}\n  gang: {nodes: 2, ranksPerNode: 2}\n"),
			"spec.gang.ranksPerNode: ranks per node needs every agent at schema 1.1 or newer, and b, c run 1.0: finish upgrading the mesh first"},
	} {
		if err := policyGate(c.doc, upgraded); err != nil {
			t.Errorf("%s, every live member upgraded: %v", c.name, err)
		}
		err := policyGate(c.doc, mixed)
		var ge *GateError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s, mixed: %v, want it accepted", c.name, err)
		case c.want != "" && (!errors.As(err, &ge) || err.Error() != c.want):
			t.Errorf("%s, mixed:\n got %v\nwant %s", c.name, err, c.want)
		}
	}
	if err := pushGate(storage.KindCode, mixed); err == nil || err.Error() != "kind: a code artifact needs every agent at schema 1.1 or newer, and b, c run 1.0: finish upgrading the mesh first" {
		t.Errorf("push code, mixed: %v", err)
	}
	for _, k := range []storage.Kind{storage.KindModel, storage.KindDataset} {
		if err := pushGate(k, mixed); err != nil {
			t.Errorf("push %s, mixed: %v", k, err)
		}
	}
	if err := pushGate(storage.KindCode, upgraded); err != nil {
		t.Errorf("push code, upgraded: %v", err)
	}
}

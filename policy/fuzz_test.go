package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: any bytes as a policy file give documents or positioned
// errors, never a panic; CEL expressions in them are compiled too.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, seed := range []string{
		"apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: x}\nspec: {model: {name: m}, constraints: ['node.gpus.exists(g, g.memory >= 16Gi)']}\n",
		"a: &a [*a, *a]\nb: *a\n",
		"---\n---\n",
		"apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: j}\nspec: {gang: {nodes: -1}, resources: {memory: 99999999999EiB}}\n",
		"\t",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse("fuzz.yaml", b)
	})
}

// FuzzCompileConstraint: any CEL source compiles or fails, never panics.
func FuzzCompileConstraint(f *testing.F) {
	for _, seed := range []string{`node.tier == "edge"`, `node.gpus.exists(g, g.memory >= 16 * 1024 * 1024 * 1024)`, `node.labels["zone"] == "b"`, `(((`, `node.rtt["x"] < 10.0`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = CompileConstraint(src)
	})
}

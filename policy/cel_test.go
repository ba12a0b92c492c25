package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

func testNode() *Node {
	return &Node{Name: "edge-a-1", ID: "k1", Tier: "edge", Site: "edge-a", Region: "eu-west",
		Labels: map[string]string{"city": "lyon"}, CPU: 4000, Memory: 16 << 30, FreeCPU: 1500, FreeMemory: 3 << 30,
		Arch: "arm64", Fabric: "", RTT: map[string]float64{"edge-a": 3.5},
		GPUs: []GPU{{Model: "NVIDIA L4", Memory: 24 << 30, Healthy: true, Free: true}}}
}

func TestExprMatchAndScore(t *testing.T) {
	n := testNode()
	for _, tc := range []struct {
		src     string
		numeric bool
		match   bool
		score   float64
	}{
		{`node.tier == "edge" && node.gpus.exists(g, g.memory >= 16 * GiB)`, false, true, 1},
		{`node.name == "edge-a-1" && node.id == "k1" && node.site == "edge-a" && node.region == "eu-west"`, false, true, 1},
		{`node.arch == "arm64" && node.fabric == ""`, false, true, 1},
		{`node.cpu == 4000 && node.free_cpu == 1500 && node.memory == 16 * GiB && node.free_memory == 3 * GiB`, false, true, 1},
		{`node.labels["city"] == "paris"`, false, false, 0},
		{`"zone" in node.labels`, false, false, 0},
		{`node.rtt["edge-a"] < 5.0`, false, true, 1},
		{`node.gpus.exists(g, g.model.contains("H100"))`, false, false, 0},
		{`node.gpus.all(g, g.healthy && g.free)`, false, true, 1},
		{`node.gpus.size() == 1 && node.gpus[0].model.startsWith("NVIDIA")`, false, true, 1},
		{`1024 * MiB == GiB && 1024 * GiB == TiB && KiB == 1024`, false, true, 1},
		{`double(node.free_cpu) / double(node.cpu)`, true, false, 0.375},
		{`node.cpu / 1000`, true, false, 4},
		{`1.0 - node.rtt["edge-a"] / 20.0`, true, false, 0.825},
	} {
		t.Run(tc.src, func(t *testing.T) {
			x, err := compileExpr(tc.src, tc.numeric)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.numeric {
				if got, err := x.Match(n); err != nil || got != tc.match {
					t.Errorf("Match = %v, %v; want %v", got, err, tc.match)
				}
			}
			if got, err := x.Score(n); err != nil || got != tc.score {
				t.Errorf("Score = %v, %v; want %v", got, err, tc.score)
			}
		})
	}
}

func TestExprEvalErrors(t *testing.T) {
	n := testNode()
	// A missing label is an evaluation error, not a silent false.
	x, err := CompileConstraint(`node.labels["zone"] == "b"`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Match(n); err == nil {
		t.Error("missing map key evaluated without error")
	}
	if _, err := x.Match(nil); err == nil {
		t.Error("nil node evaluated without error")
	}
	var hand Expr
	if _, err := hand.Match(n); !errors.Is(err, ErrNotCompiled) {
		t.Errorf("uncompiled Match err = %v, want ErrNotCompiled", err)
	}
	if _, err := hand.Score(n); !errors.Is(err, ErrNotCompiled) {
		t.Errorf("uncompiled Score err = %v, want ErrNotCompiled", err)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		src      string
		affinity bool
		want     string
	}{
		{`node.tier == 3`, false, "policy: CEL 1:11: found no matching overload for '_==_' applied to '(string, int)'"},
		{`node.foo`, false, "policy: CEL 1:5: undefined field 'foo'"},
		{`node.cpu`, false, "policy: CEL: expression has type int: a constraint must be bool"},
		{`node.tier`, true, "policy: CEL: expression has type string: an affinity must be bool, int or double"},
		{`  `, false, "policy: CEL: empty expression"},
		{`nodes.tier == "edge"`, false, "policy: CEL 1:1: undeclared reference to 'nodes' (in container '')"},
	} {
		compile := CompileConstraint
		if tc.affinity {
			compile = CompileAffinity
		}
		_, err := compile(tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("compile(%q) = %v\nwant %s", tc.src, err, tc.want)
		}
	}
	if _, err := CompileAffinity(`node.cpu`); err != nil {
		t.Errorf("numeric affinity: %v", err)
	}
}

// randomNode builds a node with every field the expressions read.
func randomNode(r *rand.Rand) *Node {
	tiers := []string{"edge", "onprem", "cloud"}
	n := &Node{Name: fmt.Sprintf("n%d", r.IntN(1000)), ID: fmt.Sprint(r.Uint64()), Tier: tiers[r.IntN(3)],
		Site: fmt.Sprintf("s%d", r.IntN(4)), Region: fmt.Sprintf("r%d", r.IntN(2)),
		Labels: map[string]string{}, CPU: int64(1+r.IntN(64)) * 1000, Memory: int64(1+r.IntN(512)) << 30,
		Arch: []string{"amd64", "arm64"}[r.IntN(2)], Fabric: []string{"", "ib-0", "ib-1"}[r.IntN(3)],
		RTT: map[string]float64{"s0": r.Float64() * 50}}
	n.FreeCPU, n.FreeMemory = n.CPU/int64(1+r.IntN(4)), n.Memory/int64(1+r.IntN(4))
	if r.IntN(2) == 0 {
		n.Labels["zone"] = fmt.Sprintf("z%d", r.IntN(3))
	}
	for range r.IntN(9) {
		n.GPUs = append(n.GPUs, GPU{Model: []string{"NVIDIA H100 80GB HBM3", "NVIDIA L4"}[r.IntN(2)],
			Memory: int64(16+r.IntN(65)) << 30, Healthy: r.IntN(10) > 0, Free: r.IntN(2) == 0})
	}
	return n
}

var equivalenceExprs = []string{
	`node.tier == "edge" && node.gpus.exists(g, g.memory >= 16 * GiB)`,
	`node.gpus.filter(g, g.healthy && g.free && g.model.contains("H100")).size() >= 4`,
	`"zone" in node.labels && node.labels["zone"] == "z1"`,
	`node.rtt["s0"] < 20.0 || node.site == "s3"`,
	`node.free_cpu * 2 >= node.cpu && node.free_memory >= 64 * GiB && node.memory > 0`,
	`node.arch == "amd64" && node.fabric != "" && node.region == "r1" && node.name != "n7" && node.id != ""`,
	`double(node.free_cpu) / double(node.cpu)`,
	`node.gpus.map(g, g.memory).exists(m, m > 40 * GiB) && node.gpus.all(g, g.model.lowerAscii().contains("nvidia"))`,
	`node.gpus.exists(g, g == node.gpus[0] && g.healthy) || size(node.gpus) == 0`,
	`node.gpus.size() > 1 && node.gpus[0] != node.gpus[1]`,
	`node.gpus.exists(g, g == policy.GPU{model: "NVIDIA L4", memory: 16 * GiB, healthy: true, free: true})`,
}

// TestFastFieldsAgree checks the direct field getters against cel-go's
// reflection on random nodes: both must give the same answer.
func TestFastFieldsAgree(t *testing.T) {
	slowEnv, err := newEnv(false)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	nodes := make([]*Node, 500)
	for i := range nodes {
		nodes[i] = randomNode(r)
	}
	for _, src := range equivalenceExprs {
		fast, err := compileExpr(src, true)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := compileIn(slowEnv, src, true)
		if err != nil {
			t.Fatal(err)
		}
		outcomes := map[string]bool{}
		for _, n := range nodes {
			fv, ferr := fast.Score(n)
			outcomes[fmt.Sprint(fv, ferr != nil)] = true
			sv, serr := naiveScore(slow, n)
			if fv != sv || (ferr == nil) != (serr == nil) {
				t.Fatalf("%s on %+v: fast %v, %v; reflection %v, %v", src, n, fv, ferr, sv, serr)
			}
		}
		if len(outcomes) < 2 {
			t.Errorf("%s gives one answer on every node (%v): the comparison proves little", src, outcomes)
		}
	}
}

func naiveScore(x *Expr, n *Node) (float64, error) {
	v, _, err := x.prog.Eval(map[string]any{"node": n})
	if err != nil {
		return 0, err
	}
	switch t := v.Value().(type) {
	case bool:
		if t {
			return 1, nil
		}
		return 0, nil
	case int64:
		return float64(t), nil
	case float64:
		return t, nil
	}
	return 0, fmt.Errorf("%v", v)
}

// TestExprConcurrent evaluates one expression from many goroutines, as the
// placement engine may; run with -race.
func TestExprConcurrent(t *testing.T) {
	x, err := compileExpr(equivalenceExprs[1], false)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	nodes := make([]*Node, 64)
	want := make([]bool, len(nodes))
	for i := range nodes {
		nodes[i] = randomNode(r)
		want[i], _ = x.Match(nodes[i])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Go(func() {
			for k := range 2000 {
				i := (k + w) % len(nodes)
				if got, err := x.Match(nodes[i]); err != nil || got != want[i] {
					errs <- fmt.Sprintf("node %d: %v, %v; want %v", i, got, err, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkConstraint measures one evaluation of a compiled expression
// against a node: impl=strata is Match as the placement engine calls it
// (pooled activation, direct field getters), impl=naive is cel-go's
// defaults (a map per call, fields read by reflection). It does its own
// repetitions so `-benchtime 1x` still gives a median.
func BenchmarkConstraint(b *testing.B) {
	slowEnv, err := newEnv(false)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	nodes := make([]*Node, 1024)
	for i := range nodes {
		nodes[i] = randomNode(r)
	}
	for _, c := range []struct{ name, src string }{
		{"tier", `node.tier == "edge"`},
		{"gpu-exists", `node.tier == "edge" && node.gpus.exists(g, g.memory >= 16 * GiB)`},
		{"gpu-filter", equivalenceExprs[1]},
		{"label", equivalenceExprs[2]},
		{"rtt", equivalenceExprs[3]},
		{"resources", equivalenceExprs[4]},
	} {
		fast, err := compileExpr(c.src, false)
		if err != nil {
			b.Fatal(err)
		}
		slow, err := compileIn(slowEnv, c.src, false)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range []struct {
			name string
			eval func(*Node) (float64, error)
		}{
			{"strata", fast.Score},
			{"naive", func(n *Node) (float64, error) { return naiveScore(slow, n) }},
		} {
			b.Run("expr="+c.name+"/impl="+impl.name, func(b *testing.B) {
				const evals, rounds = 20000, 7
				for b.Loop() {
					per := make([]float64, rounds)
					for k := range per {
						start := time.Now()
						for i := range evals {
							impl.eval(nodes[i%len(nodes)]) //nolint:errcheck // missing keys error on some nodes by design
						}
						per[k] = float64(time.Since(start).Nanoseconds()) / evals
					}
					sort.Float64s(per)
					b.ReportMetric(per[rounds/2], "ns/eval")
					b.ReportMetric(1e9/per[rounds/2], "evals/s")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"

	"github.com/strata-mesh/strata/policy"
)

// Node classes, after Nomad's computed node class: nodes whose attributes
// are identical as far as a constraint or affinity can tell get the same
// answer, so a decision evaluates each CEL expression once per class, not
// once per node. A class is computed once per snapshot, at Build, over
// every attribute the CEL view offers except identity (name, id) and load
// (free CPU, memory and GPUs, and RTT, which depends on the request's
// clients). An expression that reads identity or load is evaluated per
// node, as before.
//
// Each expression is checked for the node fields it reads; its answers
// are cached by the projection of the class onto those fields, so
// `node.tier == "edge"` runs once per tier even when sites and labels
// split the nodes into many classes.

// attr is one class attribute of the CEL view.
type attr int

const (
	attrTier attr = iota
	attrSite
	attrRegion
	attrLabels
	attrCPU
	attrMemory
	attrArch
	attrGPUs // model, memory and health of every GPU, in order; not Free
	attrFabric
	numAttrs
)

// fieldMask is a set of attrs; maskUncacheable marks an expression that
// reads identity or load (or something the analysis cannot see).
type fieldMask uint32

const maskUncacheable fieldMask = 1 << 31

// celField maps a CEL field of policy.Node to its attr; identity and load
// fields map to maskUncacheable.
var celField = map[string]fieldMask{
	"tier":        1 << attrTier,
	"site":        1 << attrSite,
	"region":      1 << attrRegion,
	"labels":      1 << attrLabels,
	"cpu":         1 << attrCPU,
	"memory":      1 << attrMemory,
	"arch":        1 << attrArch,
	"gpus":        1 << attrGPUs,
	"fabric":      1 << attrFabric,
	"name":        maskUncacheable,
	"id":          maskUncacheable,
	"free_cpu":    maskUncacheable,
	"free_memory": maskUncacheable,
	"rtt":         maskUncacheable,
	"gpus.free":   maskUncacheable,
}

// FieldReader may be implemented by a Constraint or a Scorer that is not a
// compiled CEL expression, to say which fields of the CEL view
// (policy.Node, by their CEL names) it reads; "gpus" covers the GPUs'
// model, memory and health, "gpus.free" their Free flags. The engine then
// evaluates it once per node class instead of once per node. A Constraint
// or Scorer that implements neither FieldReader nor is a *policy.Expr is
// evaluated on every node.
type FieldReader interface {
	NodeFields() []string
}

type classKey [numAttrs]int32

// classes is the snapshot's partition of nodes into classes.
type classes struct {
	attrs []classKey // per class: the attribute IDs
	rep   []int32    // per class: one node of it
}

// buildClasses computes every node's class; ix.nodes must be filled.
func (ix *index) buildClasses() {
	ids := [numAttrs]map[string]int32{}
	for a := range ids {
		ids[a] = map[string]int32{}
	}
	id := func(a attr, s string) int32 {
		v, ok := ids[a][s]
		if !ok {
			v = int32(len(ids[a]))
			ids[a][s] = v
		}
		return v
	}
	byKey := map[classKey]int32{}
	var b strings.Builder
	for i := range ix.nodes {
		n := &ix.nodes[i]
		var k classKey
		k[attrTier] = id(attrTier, n.Tier)
		k[attrSite] = id(attrSite, n.Site)
		k[attrRegion] = id(attrRegion, n.Region)
		b.Reset()
		for _, l := range slices.Sorted(maps.Keys(n.Labels)) {
			fmt.Fprintf(&b, "%q=%q,", l, n.Labels[l])
		}
		k[attrLabels] = id(attrLabels, b.String())
		k[attrCPU] = id(attrCPU, fmt.Sprint(n.CPU))
		k[attrMemory] = id(attrMemory, fmt.Sprint(n.Memory))
		k[attrArch] = id(attrArch, n.Arch)
		b.Reset()
		for _, g := range n.GPUs {
			fmt.Fprintf(&b, "%q/%d/%t,", g.Model, g.Memory, g.Healthy)
		}
		k[attrGPUs] = id(attrGPUs, b.String())
		k[attrFabric] = id(attrFabric, n.Fabric)
		c, ok := byKey[k]
		if !ok {
			c = int32(len(ix.cls.attrs))
			byKey[k] = c
			ix.cls.attrs = append(ix.cls.attrs, k)
			ix.cls.rep = append(ix.cls.rep, int32(i))
		}
		h := ix.hotOf(int32(i))
		h.class, h.gpuClass = c, k[attrGPUs]
	}
	ix.nGPUClasses = len(ids[attrGPUs])
}

// fieldsOf returns the fields an expression reads.
func fieldsOf(x any) fieldMask {
	switch x := x.(type) {
	case *policy.Expr:
		return exprFields(x.String())
	case FieldReader:
		var m fieldMask
		for _, f := range x.NodeFields() {
			fm, ok := celField[f]
			if !ok {
				return maskUncacheable
			}
			m |= fm
		}
		return m
	}
	return maskUncacheable
}

var (
	parseEnvOnce sync.Once
	parseEnv     *cel.Env
	exprMaskMu   sync.Mutex
	exprMasks    = map[string]fieldMask{}
)

// exprFields parses a CEL expression and returns the node fields it reads.
// Results are memoized by source: policies are placed many times.
func exprFields(src string) fieldMask {
	exprMaskMu.Lock()
	m, ok := exprMasks[src]
	exprMaskMu.Unlock()
	if ok {
		return m
	}
	m = analyzeExpr(src)
	exprMaskMu.Lock()
	if len(exprMasks) > 4096 {
		clear(exprMasks)
	}
	exprMasks[src] = m
	exprMaskMu.Unlock()
	return m
}

func analyzeExpr(src string) fieldMask {
	parseEnvOnce.Do(func() { parseEnv, _ = cel.NewEnv() })
	if parseEnv == nil {
		return maskUncacheable
	}
	ast, iss := parseEnv.Parse(src)
	if iss.Err() != nil {
		return maskUncacheable
	}
	w := fieldWalker{gpuVars: map[string]int{}}
	w.walk(ast.NativeRep().Expr(), false)
	return w.m
}

// fieldWalker collects the node fields an expression reads. It is
// conservative: any use of `node` other than a field selection, and any
// use of a GPU other than selecting a field other than free (inside a
// comprehension over node.gpus), makes the expression uncacheable.
type fieldWalker struct {
	m       fieldMask
	gpuVars map[string]int // comprehension variables ranging over node.gpus
}

func isNodeSelect(e celast.Expr, field string) bool {
	if e.Kind() != celast.SelectKind {
		return false
	}
	s := e.AsSelect()
	return s.FieldName() == field && s.Operand().Kind() == celast.IdentKind && s.Operand().AsIdent() == "node"
}

// walk visits e; gpuRangeOK says e may be node.gpus used as a whole
// (a comprehension range or the argument of size).
func (w *fieldWalker) walk(e celast.Expr, gpuRangeOK bool) {
	switch e.Kind() {
	case celast.IdentKind:
		name := e.AsIdent()
		if name == "node" || w.gpuVars[name] > 0 {
			w.m |= maskUncacheable
		}
	case celast.SelectKind:
		s := e.AsSelect()
		op := s.Operand()
		if op.Kind() == celast.IdentKind {
			name := op.AsIdent()
			if name == "node" {
				fm, ok := celField[s.FieldName()]
				if !ok {
					fm = maskUncacheable
				}
				if s.FieldName() == "gpus" && !gpuRangeOK {
					fm = maskUncacheable
				}
				w.m |= fm
				return
			}
			if w.gpuVars[name] > 0 {
				if s.FieldName() == "free" {
					w.m |= maskUncacheable
				}
				return
			}
		}
		w.walk(op, false)
	case celast.CallKind:
		c := e.AsCall()
		// size(node.gpus) and node.gpus.size() read only the count.
		size := c.FunctionName() == "size"
		if c.IsMemberFunction() {
			w.walk(c.Target(), size && len(c.Args()) == 0)
		}
		for _, a := range c.Args() {
			w.walk(a, size && len(c.Args()) == 1 && !c.IsMemberFunction())
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		rng := c.IterRange()
		overGPUs := isNodeSelect(rng, "gpus")
		w.walk(rng, true)
		w.walk(c.AccuInit(), false)
		vars := []string{c.IterVar(), c.AccuVar()}
		if c.HasIterVar2() {
			vars = append(vars, c.IterVar2())
		}
		for _, v := range vars {
			if v == "node" {
				w.m |= maskUncacheable
			}
		}
		if overGPUs {
			if c.HasIterVar2() {
				// The second variable is the element in two-variable forms.
				w.gpuVars[c.IterVar2()]++
				defer func() { w.gpuVars[c.IterVar2()]-- }()
			} else {
				w.gpuVars[c.IterVar()]++
				defer func() { w.gpuVars[c.IterVar()]-- }()
			}
		} else {
			// A variable that shadows a GPU variable is not one.
			for _, v := range vars {
				if n := w.gpuVars[v]; n > 0 {
					w.gpuVars[v] = 0
					defer func() { w.gpuVars[v] = n }()
				}
			}
		}
		w.walk(c.LoopCondition(), false)
		w.walk(c.LoopStep(), false)
		w.walk(c.Result(), false)
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			w.walk(x, false)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			w.walk(me.Key(), false)
			w.walk(me.Value(), false)
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			w.walk(f.AsStructField().Value(), false)
		}
	case celast.LiteralKind, celast.UnspecifiedExprKind:
	default:
		w.m |= maskUncacheable
	}
}

// classCache holds, for one decision, the answers of its constraints and
// affinities per node class.
type classCache struct {
	s *Snapshot
	// cons: per class, 0 not yet known, 1 every constraint holds, 2 one
	// fails. nil when a constraint must be evaluated per node.
	cons     []uint8
	consMask fieldMask
	consProj map[classKey]uint8
	// aff: per affinity, per class, the clamped score; valid[k][class]
	// says whether it is known. nil entries are evaluated per node.
	aff      [][]float64
	affKnown [][]bool
	affMask  []fieldMask
	affProj  []map[classKey]float64
	// GPU answers per GPU class (nodes with the same GPUs: models,
	// memory, health), for the gang pass: the static reason (GPU
	// signature) and the bit set of GPUs that match the request (healthy,
	// model, memory). gpuKnown says which are set.
	static   []Reason
	gpuMask  []uint64
	gpuN     []int32 // len(GPUs)
	gpuKnown []bool
	// evals counts expression evaluations made for classes.
	evals int
	// frozen is set when the decision is made: later (possibly
	// concurrent) explanations read the cache but never write it.
	frozen bool
}

// newClassCache prepares the class answers of req's constraints and
// affinities on s; an expression that reads identity or load gets none.
func newClassCache(s *Snapshot, req *Request) *classCache {
	n := len(s.ix.cls.attrs)
	cc := &classCache{s: s}
	if len(req.Constraints) > 0 {
		var m fieldMask
		for _, k := range req.Constraints {
			m |= fieldsOf(k)
		}
		if m&maskUncacheable == 0 {
			cc.cons, cc.consMask, cc.consProj = make([]uint8, n), m, map[classKey]uint8{}
		}
	}
	if g := s.ix.nGPUClasses; req.Resources.GPUs > 0 || req.Kind == Training {
		cc.static, cc.gpuMask, cc.gpuN, cc.gpuKnown = make([]Reason, g), make([]uint64, g), make([]int32, g), make([]bool, g)
	}
	cc.aff = make([][]float64, len(req.Affinities))
	cc.affKnown = make([][]bool, len(req.Affinities))
	cc.affMask = make([]fieldMask, len(req.Affinities))
	cc.affProj = make([]map[classKey]float64, len(req.Affinities))
	for k, a := range req.Affinities {
		if m := fieldsOf(a.Expr); m&maskUncacheable == 0 && a.Weight > 0 {
			cc.aff[k], cc.affKnown[k], cc.affMask[k], cc.affProj[k] = make([]float64, n), make([]bool, n), m, map[classKey]float64{}
		}
	}
	return cc
}

// consOK answers whether every constraint holds on node i from its
// class; known is false when the class has no answer yet and the cache
// is frozen.
func (cc *classCache) consOK(c *evalCtx, i int32, f freeState) (ok, known bool) {
	k := cc.s.ix.hotOf(i).class
	switch cc.cons[k] {
	case 1:
		return true, true
	case 2:
		return false, true
	}
	if cc.frozen {
		return false, false
	}
	pk := project(cc.s.ix.cls.attrs[k], cc.consMask)
	v, seen := cc.consProj[pk]
	if !seen {
		v = 2
		if constraintsHold(c, i, f) {
			v = 1
		}
		cc.consProj[pk] = v
		cc.evals += len(c.req.Constraints)
	}
	cc.cons[k] = v
	return v == 1, true
}

// affinity answers affinity s's score on node i from its class.
func (cc *classCache) affinity(c *evalCtx, s affinityScorer, i int32, f freeState) (float64, bool) {
	k := cc.s.ix.hotOf(i).class
	if cc.affKnown[s.k][k] {
		return cc.aff[s.k][k], true
	}
	if cc.frozen {
		return 0, false
	}
	pk := project(cc.s.ix.cls.attrs[k], cc.affMask[s.k])
	v, seen := cc.affProj[s.k][pk]
	if !seen {
		v = affinityScore(c, s.a, i, f)
		cc.affProj[s.k][pk] = v
		cc.evals++
	}
	cc.aff[s.k][k], cc.affKnown[s.k][k] = v, true
	return v, true
}

func project(k classKey, m fieldMask) classKey {
	for a := range numAttrs {
		if m&(1<<a) == 0 {
			k[a] = -1
		}
	}
	return k
}

// gpuClass returns node i's GPU class's signature reason (ReasonNoGPU,
// ReasonGPUModel or "") and matching-GPU mask and count, computing them
// from node i the first time; ok is false when they are unknown and the
// cache is frozen, or the request has no GPU cache.
func (cc *classCache) gpuClass(c *evalCtx, i int32) (r Reason, mask uint64, n int32, ok bool) {
	if cc.gpuKnown == nil {
		return "", 0, 0, false
	}
	k := cc.s.ix.hotOf(i).gpuClass
	if cc.gpuKnown[k] {
		return cc.static[k], cc.gpuMask[k], cc.gpuN[k], true
	}
	if cc.frozen {
		return "", 0, 0, false
	}
	nd := &cc.s.ix.nodes[i]
	r = c.sigOK[nd.sig]
	for j := range nd.GPUs {
		if nd.healthy&(1<<j) != 0 && c.modelOK[nd.modelIDs[j]] && nd.GPUs[j].Memory >= c.res.GPUMemory {
			mask |= 1 << j
		}
	}
	n = int32(len(nd.GPUs))
	cc.static[k], cc.gpuMask[k], cc.gpuN[k], cc.gpuKnown[k] = r, mask, n, true
	return r, mask, n, true
}

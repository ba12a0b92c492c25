package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// Expr is a CEL expression over the variable `node` (a Node). Constraints
// must be boolean; affinities boolean or numeric. An Expr is compiled when
// its document is parsed; a syntax or type error is a policy error. Match
// and Score are safe for concurrent use.
type Expr struct {
	src  string
	pos  Position
	prog cel.Program
	out  *cel.Type
}

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

// env is the CEL environment: `node` of type policy.Node (fields named by
// their `cel` tags) and byte-unit constants KiB … TiB.
func env() (*cel.Env, error) {
	envOnce.Do(func() {
		celEnv, envErr = cel.NewEnv(
			ext.NativeTypes(reflect.TypeOf(Node{}), reflect.TypeOf(GPU{}), ext.ParseStructTags(true)),
			cel.Variable("node", cel.ObjectType("policy.Node")),
			cel.Constant("KiB", cel.IntType, types.Int(1<<10)),
			cel.Constant("MiB", cel.IntType, types.Int(1<<20)),
			cel.Constant("GiB", cel.IntType, types.Int(1<<30)),
			cel.Constant("TiB", cel.IntType, types.Int(1<<40)),
			ext.Strings(),
		)
	})
	return celEnv, envErr
}

// compileExpr compiles src; numeric allows int and double results too.
func compileExpr(src string, numeric bool) (*Expr, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s", iss.Err())
	}
	out := ast.OutputType()
	switch {
	case out.IsExactType(types.BoolType):
	case numeric && (out.IsExactType(types.IntType) || out.IsExactType(types.DoubleType)):
	default:
		want := "bool"
		if numeric {
			want = "bool, int or double"
		}
		return nil, fmt.Errorf("expression has type %s, want %s", out, want)
	}
	prog, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	return &Expr{src: src, prog: prog, out: out}, nil
}

// String returns the expression as written.
func (x *Expr) String() string { return x.src }

// MarshalJSON writes the expression's source.
func (x *Expr) MarshalJSON() ([]byte, error) { return json.Marshal(x.src) }

func (x *Expr) eval(n *Node) (ref.Val, error) {
	if x.prog == nil {
		return nil, fmt.Errorf("policy: expression %q is not compiled", x.src)
	}
	v, _, err := x.prog.Eval(map[string]any{"node": n})
	if err != nil {
		return nil, fmt.Errorf("policy: %q: %w", x.src, err)
	}
	return v, nil
}

// Match evaluates a boolean expression for n.
func (x *Expr) Match(n *Node) (bool, error) {
	v, err := x.eval(n)
	if err != nil {
		return false, err
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("policy: %q gave %v, not a bool", x.src, v)
	}
	return b, nil
}

// Score evaluates the expression for n: 1 or 0 for a boolean, else its
// numeric value.
func (x *Expr) Score(n *Node) (float64, error) {
	v, err := x.eval(n)
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
	return 0, fmt.Errorf("policy: %q gave %v, not a number", x.src, v)
}

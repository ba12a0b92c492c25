package policy

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// Expr is a compiled CEL expression over the variable `node` (a Node).
// Constraints must be boolean; affinities boolean or numeric (int or
// double). An Expr in a parsed Document is compiled when the document is
// parsed, so a syntax or type error is a policy error, never a surprise at
// placement. Match and Score are safe for concurrent use and do not retain
// the node.
type Expr struct {
	src  string
	pos  Position // where the expression starts in its file
	loc  exprLoc  // how to map a CEL location back into the file
	prog cel.Program
	out  *cel.Type
}

// ErrNotCompiled is returned by Match and Score on an Expr that was never
// compiled (one built by hand, or from a document that failed to parse).
var ErrNotCompiled = errors.New("policy: expression is not compiled")

var boolType = types.BoolType

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

// env is the CEL environment: `node` of type policy.Node (fields named by
// their `cel` tags), byte-unit constants KiB … TiB and the string
// extensions.
func env() (*cel.Env, error) {
	envOnce.Do(func() { celEnv, envErr = newEnv(true) })
	return celEnv, envErr
}

// newEnv builds the environment; fast installs the direct field getters
// (false only to measure them against cel-go's reflection).
func newEnv(fast bool) (*cel.Env, error) {
	opts := []cel.EnvOption{
		ext.NativeTypes(reflect.TypeOf(Node{}), reflect.TypeOf(GPU{}), ext.ParseStructTags(true)),
		cel.Variable("node", cel.ObjectType("policy.Node")),
		cel.Constant("KiB", cel.IntType, types.Int(1<<10)),
		cel.Constant("MiB", cel.IntType, types.Int(1<<20)),
		cel.Constant("GiB", cel.IntType, types.Int(1<<30)),
		cel.Constant("TiB", cel.IntType, types.Int(1<<40)),
		ext.Strings(),
	}
	if fast {
		opts = append(opts, fastFields)
	}
	return cel.NewEnv(opts...)
}

// celError is a compile problem with its place inside the expression
// (1-based line, 0-based column as CEL counts; line 0 when unknown).
type celError struct {
	line, col int
	msg       string
}

func (e *celError) Error() string { return e.msg }

// compileExpr compiles src; numeric also allows int and double results.
func compileExpr(src string, numeric bool) (*Expr, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	return compileIn(e, src, numeric)
}

func compileIn(e *cel.Env, src string, numeric bool) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &celError{msg: "empty expression"}
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		errs := iss.Errors()
		if len(errs) == 0 {
			return nil, &celError{msg: iss.Err().Error()}
		}
		first := errs[0]
		return nil, &celError{line: first.Location.Line(), col: first.Location.Column(), msg: first.Message}
	}
	out := ast.OutputType()
	switch {
	case out.IsExactType(types.BoolType):
	case numeric && (out.IsExactType(types.IntType) || out.IsExactType(types.DoubleType)):
	default:
		want := "a constraint must be bool"
		if numeric {
			want = "an affinity must be bool, int or double"
		}
		return nil, &celError{msg: fmt.Sprintf("expression has type %s: %s", out, want)}
	}
	prog, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, &celError{msg: err.Error()}
	}
	return &Expr{src: src, prog: prog, out: out}, nil
}

// CompileConstraint compiles a boolean CEL expression over `node`, as a
// policy's constraints are compiled. The error says what is wrong.
func CompileConstraint(src string) (*Expr, error) { return compilePublic(src, false) }

// CompileAffinity compiles a boolean or numeric CEL expression over
// `node`, as a policy's affinity expressions are compiled.
func CompileAffinity(src string) (*Expr, error) { return compilePublic(src, true) }

func compilePublic(src string, numeric bool) (*Expr, error) {
	x, err := compileExpr(src, numeric)
	if err != nil {
		var ce *celError
		if errors.As(err, &ce) && ce.line > 0 {
			return nil, fmt.Errorf("policy: CEL %d:%d: %s", ce.line, ce.col+1, ce.msg)
		}
		return nil, fmt.Errorf("policy: CEL: %w", err)
	}
	return x, nil
}

// String returns the expression as written.
func (x *Expr) String() string { return x.src }

// Compiled reports whether x can be evaluated.
func (x *Expr) Compiled() bool { return x != nil && x.prog != nil }

// MarshalJSON writes the expression's source as a JSON string, with &, <
// and > left as written.
func (x *Expr) MarshalJSON() ([]byte, error) { return marshalPlain(x.src) }

// nodeActivation binds `node` for one evaluation without building a map:
// the placement engine evaluates expressions for up to 100k nodes per
// decision, and a map per call is most of the garbage.
type nodeActivation struct{ n *Node }

var _ interpreter.Activation = (*nodeActivation)(nil)

func (a *nodeActivation) ResolveName(name string) (any, bool) {
	if name == "node" {
		return a.n, true
	}
	return nil, false
}

func (a *nodeActivation) Parent() interpreter.Activation { return nil }

var activations = sync.Pool{New: func() any { return new(nodeActivation) }}

func (x *Expr) eval(n *Node) (ref.Val, error) {
	if !x.Compiled() {
		return nil, fmt.Errorf("%w: %q", ErrNotCompiled, x.String())
	}
	if n == nil {
		return nil, fmt.Errorf("policy: %q: nil node", x.src)
	}
	a := activations.Get().(*nodeActivation)
	a.n = n
	v, _, err := x.prog.Eval(a)
	a.n = nil
	activations.Put(a)
	if err != nil {
		return nil, fmt.Errorf("policy: %q: %w", x.src, err)
	}
	return v, nil
}

// Match evaluates a boolean expression for n. An evaluation error (a
// missing label key, a division by zero) is returned, never read as false.
func (x *Expr) Match(n *Node) (bool, error) {
	v, err := x.eval(n)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("policy: %q gave %v, not a bool", x.src, v)
	}
	return bool(b), nil
}

// Score evaluates the expression for n: 1 or 0 for a boolean, else its
// numeric value, unclamped (the placement engine clamps to [0, 1] and
// multiplies by the affinity's weight).
func (x *Expr) Score(n *Node) (float64, error) {
	v, err := x.eval(n)
	if err != nil {
		return 0, err
	}
	switch t := v.(type) {
	case types.Bool:
		if t {
			return 1, nil
		}
		return 0, nil
	case types.Int:
		return float64(t), nil
	case types.Double:
		return float64(t), nil
	}
	return 0, fmt.Errorf("policy: %q gave %v, not a number", x.src, v)
}

// exprLoc says how the expression's text sits in its file, so that a CEL
// error inside it can be reported at its own line and column.
type exprLoc struct {
	// mappable is false when the text was folded or unescaped by YAML and
	// columns no longer line up: errors then point at the expression.
	mappable bool
	// block is true for a literal block scalar (|): expression line k is
	// file line first+k-1 at column indent+1.
	block  bool
	first  int
	indent int
	// col0 is the file column of the expression's first character for a
	// one-line scalar.
	col0 int
}

// position maps a CEL error location to a file position.
func (x *Expr) position(line, col int) Position {
	l := x.loc
	switch {
	case !l.mappable || line < 1:
		return x.pos
	case l.block:
		return Position{Line: l.first + line - 1, Column: l.indent + col + 1}
	case line == 1:
		return Position{Line: x.pos.Line, Column: l.col0 + col}
	}
	return x.pos
}

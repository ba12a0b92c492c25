package policy

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// fieldProvider gives Node and GPU fields direct getters. cel-go's native
// types read every field through reflection and box the result; the
// placement engine evaluates expressions for up to 100k nodes per decision,
// so the common fields are read here with a type switch instead. Type
// information and everything else come from the wrapped provider.
type fieldProvider struct {
	types.Provider
	adapter types.Adapter
}

// fastFields installs fieldProvider over the environment's provider; it
// must come after ext.NativeTypes.
func fastFields(e *cel.Env) (*cel.Env, error) {
	p := &fieldProvider{Provider: e.CELTypeProvider(), adapter: e.CELTypeAdapter()}
	return cel.CustomTypeProvider(p)(e)
}

func asNode(obj any) *Node {
	switch n := obj.(type) {
	case *Node:
		return n
	case Node:
		return &n
	}
	return nil
}

// FindStructFieldType returns the wrapped provider's field type with a
// direct getter where one is known.
func (p *fieldProvider) FindStructFieldType(structType, fieldName string) (*types.FieldType, bool) {
	ft, ok := p.Provider.FindStructFieldType(structType, fieldName)
	if !ok {
		return ft, ok
	}
	var get func(obj any) ref.Val
	var mine func(obj any) bool
	switch structType {
	case "policy.Node":
		mine = func(obj any) bool {
			switch n := obj.(type) {
			case *Node:
				return n != nil
			case Node:
				return true
			}
			return false
		}
		str := func(f func(*Node) string) func(any) ref.Val {
			return func(obj any) ref.Val { return types.String(f(asNode(obj))) }
		}
		num := func(f func(*Node) int64) func(any) ref.Val {
			return func(obj any) ref.Val { return types.Int(f(asNode(obj))) }
		}
		switch fieldName {
		case "name":
			get = str(func(n *Node) string { return n.Name })
		case "id":
			get = str(func(n *Node) string { return n.ID })
		case "tier":
			get = str(func(n *Node) string { return n.Tier })
		case "site":
			get = str(func(n *Node) string { return n.Site })
		case "region":
			get = str(func(n *Node) string { return n.Region })
		case "arch":
			get = str(func(n *Node) string { return n.Arch })
		case "fabric":
			get = str(func(n *Node) string { return n.Fabric })
		case "cpu":
			get = num(func(n *Node) int64 { return n.CPU })
		case "memory":
			get = num(func(n *Node) int64 { return n.Memory })
		case "free_cpu":
			get = num(func(n *Node) int64 { return n.FreeCPU })
		case "free_memory":
			get = num(func(n *Node) int64 { return n.FreeMemory })
		case "labels":
			get = func(obj any) ref.Val { return types.NewStringStringMap(p.adapter, asNode(obj).Labels) }
		case "gpus":
			get = func(obj any) ref.Val { return types.NewDynamicList(p.adapter, asNode(obj).GPUs) }
		case "rtt":
			get = func(obj any) ref.Val { return types.NewDynamicMap(p.adapter, asNode(obj).RTT) }
		}
	case "policy.GPU":
		mine = func(obj any) bool {
			switch g := obj.(type) {
			case *GPU:
				return g != nil
			case GPU:
				return true
			}
			return false
		}
		gpu := func(f func(*GPU) ref.Val) func(any) ref.Val {
			return func(obj any) ref.Val {
				switch g := obj.(type) {
				case GPU:
					return f(&g)
				case *GPU:
					return f(g)
				}
				return nil
			}
		}
		switch fieldName {
		case "model":
			get = gpu(func(g *GPU) ref.Val { return types.String(g.Model) })
		case "memory":
			get = gpu(func(g *GPU) ref.Val { return types.Int(g.Memory) })
		case "healthy":
			get = gpu(func(g *GPU) ref.Val { return types.Bool(g.Healthy) })
		case "free":
			get = gpu(func(g *GPU) ref.Val { return types.Bool(g.Free) })
		}
	}
	if get == nil {
		return ft, true
	}
	slow := ft.GetFrom
	fast := *ft
	fast.GetFrom = func(obj any) (any, error) {
		if mine(obj) {
			return get(obj), nil
		}
		return slow(obj) // not a value this getter knows
	}
	return &fast, true
}

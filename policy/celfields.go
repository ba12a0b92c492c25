package policy

import (
	"reflect"

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
	gpuType ref.Type // policy.GPU as the native provider types it
}

// fastFields installs fieldProvider over the environment's provider; it
// must come after ext.NativeTypes.
func fastFields(e *cel.Env) (*cel.Env, error) {
	p := &fieldProvider{Provider: e.CELTypeProvider(), adapter: e.CELTypeAdapter()}
	p.gpuType = p.adapter.NativeToValue(GPU{}).Type()
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
			get = func(obj any) ref.Val { return p.gpuList(asNode(obj).GPUs) }
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

// gpuList is the node's GPUs as a CEL list whose elements read their fields
// through the direct getters, without converting each GPU by reflection.
func (p *fieldProvider) gpuList(gs []GPU) ref.Val {
	vals := make([]ref.Val, len(gs))
	for i := range gs {
		vals[i] = gpuVal{g: &gs[i], p: p}
	}
	return types.NewRefValList(p.adapter, vals)
}

// gpuVal is one GPU as a CEL value. Field selection goes through Value
// (the *GPU) and the direct getters; everything else is delegated to the
// native types' own value for the GPU.
type gpuVal struct {
	g *GPU
	p *fieldProvider
}

func (v gpuVal) native() ref.Val { return v.p.adapter.NativeToValue(*v.g) }

// ConvertToNative implements ref.Val.
func (v gpuVal) ConvertToNative(t reflect.Type) (any, error) { return v.native().ConvertToNative(t) }

// ConvertToType implements ref.Val.
func (v gpuVal) ConvertToType(t ref.Type) ref.Val { return v.native().ConvertToType(t) }

// Equal implements ref.Val.
func (v gpuVal) Equal(other ref.Val) ref.Val {
	if o, ok := other.(gpuVal); ok {
		other = o.native()
	}
	return v.native().Equal(other)
}

// Type implements ref.Val.
func (v gpuVal) Type() ref.Type { return v.p.gpuType }

// Value implements ref.Val.
func (v gpuVal) Value() any { return v.g }

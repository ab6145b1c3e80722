// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"strings"

	"github.com/cilium/ebpf/btf"
)

// Kernel is the running kernel's BTF, read once and shared by every load
// a command makes, instead of each load parsing /sys/kernel/btf/vmlinux
// on its own (TestKernelShared prints what a load allocates either way).
// The loaders accept a nil *Kernel and then parse for themselves. Drop it
// once the programs are loaded so the parsed types can be freed.
type Kernel struct{ cache *btf.Cache }

// NewKernel returns a Kernel that parses on first use.
func NewKernel() *Kernel { return &Kernel{cache: btf.NewCache()} }

// orNew is k, or a Kernel of its own for a loader given none.
func (k *Kernel) orNew() *Kernel {
	if k == nil {
		return NewKernel()
	}
	return k
}

// types is the cache loads pass to cilium/ebpf.
func (k *Kernel) types() *btf.Cache { return k.cache }

// spec is the kernel's types, or why there are none.
func (k *Kernel) spec() (*btf.Spec, error) {
	sp, err := k.types().Kernel()
	if err != nil {
		return nil, notSupported("no kernel BTF (/sys/kernel/btf/vmlinux): %v", err)
	}
	return sp, nil
}

// enumNames reads enum name from the kernel BTF with prefix cut off each
// value's name; nil when the kernel has no such enum.
func enumNames(spec *btf.Spec, name string, prefixes ...string) map[uint32]string {
	var e *btf.Enum
	if err := spec.TypeByName(name, &e); err != nil {
		return nil
	}
	m := make(map[uint32]string, len(e.Values))
	for _, v := range e.Values {
		s := v.Name
		for _, p := range prefixes {
			if c, ok := strings.CutPrefix(s, p); ok {
				s = c
				break
			}
		}
		m[uint32(v.Value)] = s
	}
	return m
}

// hasEnumValue reports whether the kernel BTF's enum has a value called
// value.
func hasEnumValue(spec *btf.Spec, enum, value string) bool {
	var e *btf.Enum
	if err := spec.TypeByName(enum, &e); err != nil {
		return false
	}
	for _, v := range e.Values {
		if v.Name == value {
			return true
		}
	}
	return false
}

// tracepointParams returns the parameter types of the BTF tracepoint
// name (its btf_trace_ typedef), the context pointer first.
func tracepointParams(spec *btf.Spec, name string) ([]btf.FuncParam, error) {
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &td); err != nil {
		return nil, notSupported("kernel has no %s tracepoint: %v", name, err)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return nil, notSupported("%s: unexpected tracepoint type %v", name, td.Type)
	}
	proto, ok := btf.UnderlyingType(ptr.Target).(*btf.FuncProto)
	if !ok {
		return nil, notSupported("%s: unexpected tracepoint type %v", name, ptr.Target)
	}
	return proto.Params, nil
}

// isEnum reports whether t is (a qualified) enum called name.
func isEnum(t btf.Type, name string) bool {
	e, ok := btf.UnderlyingType(t).(*btf.Enum)
	return ok && e.Name == name
}

func isSockPtr(t btf.Type) bool {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return false
	}
	st, ok := btf.UnderlyingType(p.Target).(*btf.Struct)
	return ok && st.Name == "sock"
}

package bpfsource

import "github.com/cilium/ebpf/btf"

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

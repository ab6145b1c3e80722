package bpfsource

import "github.com/cilium/ebpf/btf"

// Kernel is the running kernel's BTF, read once and shared by every load
// a command makes: each load that parses /sys/kernel/btf/vmlinux on its
// own costs about 15 ms of CPU and several MB. A
// nil *Kernel is usable: each load then parses for itself. Drop it once
// the programs are loaded so the parsed types can be freed.
type Kernel struct{ cache *btf.Cache }

// NewKernel returns a Kernel that parses on first use.
func NewKernel() *Kernel { return &Kernel{cache: btf.NewCache()} }

// types is the cache loads pass to cilium/ebpf. On a nil Kernel each call
// is a new cache: a function that needs the types twice makes a Kernel
// first (as OpenFileOwners does).
func (k *Kernel) types() *btf.Cache {
	if k == nil {
		return btf.NewCache()
	}
	return k.cache
}

// spec is the kernel's types, or why there are none.
func (k *Kernel) spec() (*btf.Spec, error) {
	sp, err := k.types().Kernel()
	if err != nil {
		return nil, notSupported("no kernel BTF (/sys/kernel/btf/vmlinux): %v", err)
	}
	return sp, nil
}

// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"sync"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Kept is something a rule reads of the sample that starts its window
// and that the window's Base does not hold whole (a tally of its
// established connections): the rule lists it in Rule.Keeps, and it is
// computed from the whole sample when the Base is made. The key is a
// comparable type of the rule's package, usually an empty struct whose
// Keep is a pure function of the sample.
type Kept[T any] interface {
	Keep(s *snapshot.Snapshot) T
}

// Keeper is a Kept of any type, as Rule.Keeps lists it (Keep makes one).
type Keeper interface {
	key() any
	keep(s *snapshot.Snapshot) any
}

type keeper[T any] struct{ k Kept[T] }

func (k keeper[T]) key() any                      { return k.k }
func (k keeper[T]) keep(s *snapshot.Snapshot) any { return k.k.Keep(s) }

// Keep lists k in a Rule's Keeps.
func Keep[T any](k Kept[T]) Keeper { return keeper[T]{k} }

// KeepsOf is every Keeper the rules list, each once.
func KeepsOf(rs []Rule) []Keeper {
	var out []Keeper
	seen := map[any]bool{}
	for _, r := range rs {
		for _, k := range r.Keeps {
			if !seen[k.key()] {
				seen[k.key()] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// KeptOf returns what k kept of the sample that starts in's window; ok
// is false without one. A Base made by NewBase holds only what its
// keepers asked for, and reading anything else panics (the engine
// reports the rule unknown): the rule did not list k in its Keeps. A
// Base of a whole sample (NewInput) computes k from it at the first ask.
func KeptOf[T any](in *Input, k Kept[T]) (T, bool) {
	var zero T
	b := in.base
	if b == nil {
		return zero, false
	}
	if v, ok := b.kept[any(k)]; ok {
		return v.(T), true
	}
	if b.whole == nil {
		panic(fmt.Sprintf("diag: %T was not kept of the window's first sample: list it in the rule's Keeps", k))
	}
	return b.later.get(any(k), func() any { return k.Keep(b.whole) }).(T), true
}

// Memo is an index or tally rules derive from a window (a million
// sockets' worth) that more than one of them reads: MemoOf computes it
// once per Input. The key is a comparable type of the package that
// computes it, usually an empty struct; Compute must be a pure function
// of the Input, and callers must not change what it returns.
type Memo[T any] interface {
	Compute(in *Input) T
}

// MemoOf returns m computed over in, once per Input: whichever rule asks
// first computes it while the others wait.
func MemoOf[T any](in *Input, m Memo[T]) T {
	return in.memos.get(any(m), func() any { return m.Compute(in) }).(T)
}

// onceMap computes each key's value once, for concurrent readers.
type onceMap struct {
	mu sync.Mutex
	m  map[any]*onceValue
}

type onceValue struct {
	once sync.Once
	v    any
}

func (om *onceMap) get(key any, fn func() any) any {
	om.mu.Lock()
	if om.m == nil {
		om.m = map[any]*onceValue{}
	}
	ov := om.m[key]
	if ov == nil {
		ov = &onceValue{}
		om.m[key] = ov
	}
	om.mu.Unlock()
	ov.once.Do(func() { ov.v = fn() })
	return ov.v
}

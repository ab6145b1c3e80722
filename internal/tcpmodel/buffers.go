// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Lock bits of SO_BUF_LOCK (sk_userlocks): the application set the size.
const (
	LockSnd uint8 = 1
	LockRcv uint8 = 2
)

// Pin is the verdict on whether a socket buffer was set by the
// application (SO_SNDBUF/SO_RCVBUF, which stop autotuning) and why.
type Pin struct {
	Pinned bool   // proven or hinted
	Proof  bool   // the lock bit was read (iter/tcp or SO_BUF_LOCK)
	Capped bool   // the size is 2 x the net.core.*mem_max cap
	Why    string // the evidence used, for people
	From   string // snapshot.LocksIter or LocksPidfd, with Proof
}

// Source names where the verdict came from.
func (p Pin) Source() string {
	switch {
	case p.Proof && p.From == snapshot.LocksIter:
		return "sk_userlocks (the SO_BUF_LOCK bits) via eBPF iter/tcp"
	case p.Proof:
		return "getsockopt(SO_BUF_LOCK) via pidfd_getfd"
	}
	return "SK_MEMINFO size pattern and sysctls (hint)"
}

// Limits are a namespace's limits for one direction, from sysctls (0 when
// not collected): Core is net.core.wmem_max/rmem_max, Initial and Auto
// are tcp_wmem/tcp_rmem [1] and [2].
type Limits struct{ Core, Initial, Auto int64 }

// SndLimits reads the send side's limits.
func SndLimits(s *snapshot.Snapshot) Limits {
	return limitsOf(s, "net.core.wmem_max", "net.ipv4.tcp_wmem")
}

// RcvLimits reads the receive side's limits.
func RcvLimits(s *snapshot.Snapshot) Limits {
	return limitsOf(s, "net.core.rmem_max", "net.ipv4.tcp_rmem")
}

func limitsOf(s *snapshot.Snapshot, core, tcp string) Limits {
	var l Limits
	l.Core, _ = s.SysctlInt(core)
	if v, ok := s.SysctlInts(tcp); ok && len(v) == 3 {
		l.Initial, l.Auto = v[1], v[2]
	}
	return l
}

// JudgeBuf decides whether a buffer of size bytes (the kernel's doubled
// value) was pinned. lock is SO_BUF_LOCK when read and bit the bit for
// this direction; prev is the size in the previous sample (0 when none).
// Without the lock bit the verdict is a hint: a size of exactly 2 x the
// cap, or 2 x a power of two (the kernel doubles requests; autotuned sizes
// are not round), unchanged across samples.
func JudgeBuf(size, prev uint32, lock snapshot.Flags, bit uint8, lim Limits) Pin {
	return JudgeBufFrom(size, prev, lock, bit, lim, nil)
}

// JudgeBufFrom is JudgeBuf for a snapshot whose lock bits came from
// origin (Snapshot.BufLocks; nil in files from before it was recorded,
// where bits were read via pidfd_getfd): the verdict names the source, or
// why the bits are unknown.
func JudgeBufFrom(size, prev uint32, lock snapshot.Flags, bit uint8, lim Limits, origin *snapshot.BufLockOrigin) Pin {
	sz := int64(size)
	capped := lim.Core > 0 && sz == 2*lim.Core
	if bits, ok := lock.Get(); ok {
		p := Pin{Proof: true, Pinned: bits&bit != 0, From: snapshot.LocksPidfd}
		p.Capped = p.Pinned && capped
		how := "SO_BUF_LOCK read from the owner via pidfd_getfd"
		if origin != nil && origin.From == snapshot.LocksIter {
			p.From, how = snapshot.LocksIter, "sk_userlocks read with the eBPF iter/tcp iterator"
		}
		if p.Pinned {
			p.Why = how + ": set by the application"
		} else {
			p.Why = how + ": not set (autotuned)"
		}
		return p
	}
	var why []string
	if capped {
		why = append(why, fmt.Sprintf("equals 2 x the %s cap", units.Bytes(float64(lim.Core))))
	}
	half := sz / 2
	if !capped && sz%2 == 0 && half >= 2048 && half&(half-1) == 0 && sz != lim.Initial && sz != lim.Auto {
		why = append(why, fmt.Sprintf("equals 2 x %s (the kernel doubles SO_SNDBUF/SO_RCVBUF requests)", units.Bytes(float64(half))))
	}
	if len(why) > 0 && prev != 0 && prev == size {
		why = append(why, "unchanged across samples")
	}
	if len(why) == 0 {
		return Pin{}
	}
	notRead := "SO_BUF_LOCK not read"
	if origin != nil && origin.From == "" && origin.Why != "" {
		notRead = "lock bits not read: " + origin.Why
	}
	return Pin{Pinned: true, Capped: capped, Why: strings.Join(why, ", ") + " (a hint, not proof: " + notRead + ")"}
}

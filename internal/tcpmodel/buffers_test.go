// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// The verdict names where the lock bit came from, or why it is unknown.
func TestJudgeBufFrom(t *testing.T) {
	lim := Limits{Core: 212992, Initial: 131072, Auto: 6291456}
	lock := LockSnd | LockRcv
	iter := &snapshot.BufLockOrigin{From: snapshot.LocksIter}
	p := JudgeBufFrom(32768, 0, snapshot.FlagsOf(lock), LockSnd, lim, iter)
	if !p.Pinned || !p.Proof || p.Source() != "sk_userlocks (the SO_BUF_LOCK bits) via eBPF iter/tcp" || !strings.Contains(p.Why, "iter/tcp") {
		t.Errorf("iter/tcp lock: %+v, source %q", p, p.Source())
	}
	none := uint8(0)
	if p := JudgeBufFrom(32768, 0, snapshot.FlagsOf(none), LockRcv, lim, iter); p.Pinned || !p.Proof || !strings.Contains(p.Why, "not set") {
		t.Errorf("iter/tcp, not locked: %+v", p)
	}
	// Files from before the origin was recorded read it via pidfd_getfd.
	if p := JudgeBufFrom(32768, 0, snapshot.FlagsOf(lock), LockSnd, lim, nil); p.Source() != "getsockopt(SO_BUF_LOCK) via pidfd_getfd" {
		t.Errorf("no origin: source %q", p.Source())
	}
	off := &snapshot.BufLockOrigin{Why: "eBPF off (--bpf off)"}
	p = JudgeBufFrom(32768, 32768, snapshot.Flags{}, LockSnd, lim, off)
	if !p.Pinned || p.Proof || !strings.HasSuffix(p.Why, "(a hint, not proof: lock bits not read: eBPF off (--bpf off))") {
		t.Errorf("unknown lock: %+v", p)
	}
	if p := JudgeBufFrom(1234567, 0, snapshot.Flags{}, LockSnd, lim, off); p.Pinned {
		t.Errorf("autotuned size judged pinned: %+v", p)
	}
}

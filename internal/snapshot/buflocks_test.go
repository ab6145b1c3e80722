// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"testing"
	"time"
)

// Where the lock bits came from, or why they are unknown, survives a
// record and replay (--from).
func TestBufLocksRoundTrip(t *testing.T) {
	lock := uint8(1)
	in := []*Snapshot{
		{Taken: time.Unix(1, 0).UTC(), BufLocks: &BufLockOrigin{From: LocksIter}, Sockets: []Socket{{State: Established, Cookie: 9, BufLock: FlagsOf(lock)}, {State: TimeWait, Cookie: 10}}},
		{Taken: time.Unix(2, 0).UTC(), BufLocks: &BufLockOrigin{Why: "eBPF off (--bpf off)"}},
		{Taken: time.Unix(3, 0).UTC()},
	}
	out, err := ReadAll(written(t, in...))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0].BufLocks == nil || *out[0].BufLocks != *in[0].BufLocks || !out[0].Sockets[0].BufLock.Known() ||
		out[0].Sockets[0].BufLock.Bits() != 1 || out[0].Sockets[1].BufLock.Known() ||
		out[1].BufLocks == nil || *out[1].BufLocks != *in[1].BufLocks || out[2].BufLocks != nil {
		t.Errorf("read back %+v %+v %+v", out[0], out[1], out[2])
	}
}

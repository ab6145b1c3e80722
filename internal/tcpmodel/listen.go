// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Fill is a listener's accept queue: sock_diag reports the queue in
// Recv-Q and the effective backlog, min(listen() backlog, somaxconn), in
// Send-Q.
type Fill struct{ Queue, Backlog uint32 }

// FillOf reads a LISTEN socket's queue.
func FillOf(sk *snapshot.Socket) Fill { return Fill{Queue: sk.RecvQ, Backlog: sk.SendQ} }

// Full reports the kernel's sk_acceptq_is_full: the queue is longer than
// the backlog, so the next completed handshake is dropped (a backlog of 8
// holds 9).
func (f Fill) Full() bool { return f.Queue > f.Backlog }

// Frac is the queue against its backlog (the queue itself for backlog 0).
func (f Fill) Frac() float64 {
	if f.Backlog == 0 {
		return float64(f.Queue)
	}
	return float64(f.Queue) / float64(f.Backlog)
}

// MinBacklog is the smallest accept backlog recommended: the kernel's
// default somaxconn since Linux 5.4.
const MinBacklog = 4096

// BacklogTarget is the backlog to recommend: the next power of two at or
// above twice what was observed (queue peak or current backlog), and at
// least MinBacklog.
func BacklogTarget(peak, backlog int64) int64 {
	return NextPow2(max(MinBacklog, 2*peak, 2*backlog))
}

// NextPow2 returns the smallest power of two >= n (1 for n <= 1).
func NextPow2(n int64) int64 {
	p := int64(1)
	for p < n && p < 1<<62 {
		p <<= 1
	}
	return p
}

// BacklogBinding says which limit set a listener's effective backlog:
// listen() takes min(asked, somaxconn).
func BacklogBinding(backlog, somax int64, hasSomax bool) (short, long string) {
	switch {
	case !hasSomax:
		return "from an unknown limit", "unknown: net.core.somaxconn not collected"
	case backlog == somax:
		return fmt.Sprintf("capped by net.core.somaxconn %d", somax), fmt.Sprintf("somaxconn %d capped it: the application asked for %d or more", somax, somax)
	case backlog < somax:
		return fmt.Sprintf("the application's own (somaxconn %d)", somax), fmt.Sprintf("the application asked for %d in listen(); somaxconn %d would allow more", backlog, somax)
	}
	return "above today's somaxconn", fmt.Sprintf("somaxconn (%d) was lowered after this listen(); the listener keeps %d until it listens again", somax, backlog)
}

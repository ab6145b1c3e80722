// SPDX-License-Identifier: Apache-2.0

// Package tracetest makes recordings for the tests of the packages that
// render or judge traces.
package tracetest

import (
	"net/netip"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// Responses is a recording as the lab's c5 makes one: a server writing n
// 3.4 MB responses, each after a 200-byte request, to a client whose
// 64 KiB window holds it (cwnd 200 segments of 64 KiB and Send-Q are
// megabytes), sampled every interval; in the second response the sampler
// stalls for 300 ms (a gap in the samples).
func Responses(n int, interval time.Duration) *trace.Trace {
	const mss, total = 65483, 3_400_000
	c := &trace.Conn{ID: 1, Local: netip.MustParseAddrPort("198.18.0.1:8080"), Remote: netip.MustParseAddrPort("198.18.1.2:40000"), CC: "cubic"}
	var acked, recvd, busy, rwnd uint64
	var at time.Duration
	add := func(sendq, unacked uint32) {
		c.Points = append(c.Points, trace.Point{T: at, Conn: 1, State: snapshot.Established, Acked: acked, Recvd: recvd, Busy: busy, Rwnd: rwnd,
			SendQ: sendq, Chrono: true, MSS: mss, Cwnd: 200, Unacked: unacked, RTT: 200, SndWnd: 65536, RcvWnd: 65536, Rate: 5_600_000})
		at += interval
	}
	us := uint64(interval / time.Microsecond)
	for r := 0; r < n; r++ {
		for i := 0; i < 20; i++ { // idle between responses
			add(0, 0)
		}
		recvd += 200 // the request
		for left, i := uint64(total), 0; left > 0; i++ {
			d := min(left, total/60)
			left, acked, busy, rwnd = left-d, acked+d, busy+us, rwnd+us*9/10
			if r == 1 && i == 20 {
				// The sampler stalled; the kernel's busy time ran on
				// (data stayed queued), most of it window-limited.
				stall := uint64(300 * time.Millisecond / time.Microsecond)
				at, busy, rwnd = at+300*time.Millisecond, busy+stall, rwnd+stall*9/10
			}
			add(uint32(left), 1)
		}
	}
	add(0, 0)
	return &trace.Trace{Header: trace.Header{Trace: trace.Version, Interval: interval, Filter: "port 8080",
		Started: time.Date(2026, 12, 6, 23, 29, 0, 0, time.UTC)}, Conns: []*trace.Conn{c}}
}

// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// BenchmarkRow is the printer's cost of one socket of `sockets` and
// `sockets --json` (what docs/performance.md times, less the dump).
func BenchmarkRow(b *testing.B) {
	sk := snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:80")),
		Remote: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.2:40000")), Pids: snapshot.PidsOf(42), Mem: &snapshot.MemInfo{Sndbuf: 87040, Rcvbuf: 131072}}
	lim := tcpmodel.Limited{Window: time.Second, Busy: 0.5, Sndbuf: 0.25, Rwnd: 0.25, Congestion: 0.5}
	r := rowOf("host", &sk, "nginx", true)
	r.Limited = &lim
	for _, c := range []struct {
		name string
		json bool
	}{{"table", false}, {"json", true}} {
		b.Run(c.name, func(b *testing.B) {
			p := NewPrinter(bufio.NewWriterSize(io.Discard, 64<<10), Options{JSON: c.json, Netns: true, Limited: true})
			b.ReportAllocs()
			for b.Loop() {
				_ = p.Row(&r)
			}
		})
	}
}

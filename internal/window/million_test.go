// SPDX-License-Identifier: Apache-2.0

package window

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// millionSockets is a sample shaped like the bench's (docs/performance.md):
// 56 holders, each a listener and up to 8,929 connections to it, both ends
// owned, tcp_info packed as collected; taken at t.
func millionSockets(t time.Time) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Taken: t, Netns: snapshot.Netns{Name: "bench"},
		Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "32768 60999"}}
	s.Sockets = make([]snapshot.Socket, 0, 1_000_056)
	var st snapshot.Store
	lo := netip.MustParseAddr("127.0.0.1")
	info := snapshot.TCPInfo{State: uint8(snapshot.Established), RTT: 40, MinRTT: 20, SndMSS: 65483, SndCwnd: 10, PacingRate: 1 << 30}
	mem := snapshot.MemInfo{Rcvbuf: 131072, Sndbuf: 3939840}
	for h := range 56 {
		pid := 1000 + h
		srv := netip.AddrPortFrom(lo, uint16(10000+h))
		ln := snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: uint64(len(s.Sockets) + 1), Local: snapshot.EndpointOf(srv), Pids: snapshot.PidsOf(pid), SendQ: 4096}
		s.Sockets = append(s.Sockets, st.Keep(&ln))
		for j := range 8929 {
			if len(s.Sockets) >= 1_000_056 {
				break
			}
			cli := netip.AddrPortFrom(lo, uint16(32768+j))
			ti := info
			ti.RTT += uint32(j % 7)
			c := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: uint64(len(s.Sockets) + 1), Local: snapshot.EndpointOf(cli), Remote: snapshot.EndpointOf(srv), Pids: snapshot.PidsOf(pid), Info: snapshot.TCPOf(&ti), Mem: &mem}
			s.Sockets = append(s.Sockets, st.Keep(&c))
			a := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: uint64(len(s.Sockets) + 1), Local: snapshot.EndpointOf(srv), Remote: snapshot.EndpointOf(cli), Pids: snapshot.PidsOf(pid), Info: snapshot.TCPOf(&ti), Mem: &mem}
			s.Sockets = append(s.Sockets, st.Keep(&a))
		}
	}
	return s
}

// BenchmarkBaseMillion keeps the first sample of a window of a million
// sockets as every rule reads it (diag.NewBase) and reports the bytes the
// base holds beside the sample (kept-B, heap after a collection):
// `go test -run XXX -bench BaseMillion -benchtime 5x -cpu 1 ./internal/window`.
func BenchmarkBaseMillion(b *testing.B) {
	s := millionSockets(time.Unix(100, 0))
	keep := diag.KeepsOf(rules.All())
	var kept uint64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		base := diag.NewBase(s, keep)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.StartTimer()
		kept = m1.HeapAlloc - m0.HeapAlloc
		runtime.KeepAlive(base)
	}
	b.ReportMetric(float64(kept), "kept-B")
}

// BenchmarkRulesMillion runs every rule over a window of a million idle
// sockets (report.Diagnose), its first sample kept as a base.
func BenchmarkRulesMillion(b *testing.B) {
	rs := rules.All()
	base := diag.NewBase(millionSockets(time.Unix(100, 0)), diag.KeepsOf(rs))
	cur := millionSockets(time.Unix(101, 0))
	for b.Loop() {
		one := func(yield func(*diag.Input) bool) { yield(diag.NewInputFrom(base, cur, diag.Options{})) }
		if rep := report.Diagnose(one, rs); len(rep.RulesRun) != len(rs) {
			b.Fatalf("%d rules ran", len(rep.RulesRun))
		}
	}
}

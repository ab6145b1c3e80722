// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

func TestJudgeBuf(t *testing.T) {
	lim := tcpmodel.Limits{Core: 212992, Initial: 16384, Auto: 4194304}
	one, zero := uint8(1), uint8(0)
	for _, c := range []struct {
		name           string
		size, prev     uint32
		lock           snapshot.Flags
		pinned, capped bool
		proof          bool
	}{
		{"doubled 16K", 32768, 32768, snapshot.Flags{}, true, false, false},
		{"capped", 425984, 0, snapshot.Flags{}, true, true, false},
		{"autotuned 87040", 87040, 87040, snapshot.Flags{}, false, false, false},
		{"initial tcp_wmem[1]", 16384, 16384, snapshot.Flags{}, false, false, false},
		{"autotuning max", 4194304, 4194304, snapshot.Flags{}, false, false, false},
		{"lock proves", 87040, 0, snapshot.FlagsOf(one), true, false, true},
		{"lock clears", 32768, 0, snapshot.FlagsOf(zero), false, false, true},
		{"tiny", 2048, 0, snapshot.Flags{}, false, false, false},
	} {
		p := tcpmodel.JudgeBuf(c.size, c.prev, c.lock, 1, lim)
		if p.Pinned != c.pinned || p.Capped != c.capped || p.Proof != c.proof {
			t.Errorf("%s: %+v", c.name, p)
		}
	}
}

func TestSndbufLook(t *testing.T) {
	ti := &snapshot.TCPInfo{Len: snapshot.SizeKnown, SndMSS: 1448, Unacked: 46, SndCwnd: 300, SndWnd: 3 << 20, RTT: 20000}
	m := &snapshot.MemInfo{Sndbuf: 32768, WmemQueued: 69632}
	l, ok := lookSndbuf(&snapshot.Socket{Info: snapshot.TCPOf(ti), Mem: m})
	if !ok || !l.limited() {
		t.Fatalf("pinned sample not limited: %+v", l)
	}
	// cwnd-limited: cwnd equals what is in flight.
	cw := *ti
	cw.SndCwnd = 46
	if l, _ := lookSndbuf(&snapshot.Socket{Info: snapshot.TCPOf(&cw), Mem: m}); l.limited() {
		t.Error("cwnd-limited sample judged sndbuf-limited")
	}
	// receiver-limited: the peer's window equals what is in flight.
	rw := *ti
	rw.SndWnd = 46 * 1448
	if l, _ := lookSndbuf(&snapshot.Socket{Info: snapshot.TCPOf(&rw), Mem: m}); l.limited() {
		t.Error("rwnd-limited sample judged sndbuf-limited")
	}
	// Missing data is not a verdict.
	for _, sk := range []*snapshot.Socket{{}, {Info: snapshot.TCPOf(ti)}, {Mem: m}, {Info: snapshot.TCPOf(&snapshot.TCPInfo{}), Mem: m}} {
		if _, ok := lookSndbuf(sk); ok {
			t.Errorf("incomplete socket looked at: %+v", sk)
		}
	}
}

func est(cookie uint64, ti *snapshot.TCPInfo, m *snapshot.MemInfo) snapshot.Socket {
	return snapshot.Socket{State: snapshot.Established, Cookie: cookie, Info: snapshot.TCPOf(ti), Mem: m,
		Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:40000")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.2:80"))}
}

func TestZeroRTTAndMissingInfo(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Zero RTT (not yet measured): no finding, no panic.
	ti := &snapshot.TCPInfo{Len: snapshot.SizeKnown, SndMSS: 1448, Unacked: 46, SndCwnd: 300, SndWnd: 3 << 20}
	cur := &snapshot.Snapshot{Taken: t0, Sockets: []snapshot.Socket{est(1, ti, &snapshot.MemInfo{Sndbuf: 32768, WmemQueued: 69632})}}
	for _, r := range []diag.Rule{sndbufLimited(), rwndLimited(), bufferLimits()} {
		fs, _ := r.Check(diag.NewInput(nil, cur, diag.Options{}))
		if len(fs) != 0 {
			t.Errorf("%s: finding on zero RTT: %+v", r.ID, fs)
		}
	}
	// No tcp_info at all for established sockets: unknown, not healthy.
	bare := &snapshot.Snapshot{Taken: t0, Sockets: []snapshot.Socket{est(1, nil, nil)}}
	for _, r := range []diag.Rule{sndbufLimited(), rwndLimited(), connectionBottleneck()} {
		if _, err := r.Check(diag.NewInput(bare, bare, diag.Options{})); err == nil {
			t.Errorf("%s: no error without tcp_info", r.ID)
		}
	}
	failed := &snapshot.Snapshot{Taken: t0, Errors: []snapshot.SourceError{{Source: snapshot.SourceSockdiag, Err: "EPERM"}}}
	if _, err := slowReader().Check(diag.NewInput(failed, failed, diag.Options{})); err == nil {
		t.Error("slow-reader: no error with sock_diag failed")
	}
	if _, err := bufferLimits().Check(diag.NewInput(nil, &snapshot.Snapshot{Taken: t0}, diag.Options{})); err == nil {
		t.Error("buffer-limits: no error without sysctls")
	}
}

func TestRetransCounterDecrease(t *testing.T) {
	prev := &snapshot.Snapshot{Taken: time.Unix(0, 0), Counters: map[string]int64{"Tcp.OutSegs": 1e6, "Tcp.RetransSegs": 9e5}}
	cur := &snapshot.Snapshot{Taken: time.Unix(5, 0), Counters: map[string]int64{"Tcp.OutSegs": 10, "Tcp.RetransSegs": 5}}
	fs, err := retransmissions().Check(diag.NewInput(prev, cur, diag.Options{}))
	if len(fs) != 0 {
		t.Errorf("reset counters gave findings: %+v", fs)
	}
	if err == nil {
		t.Error("no usable data but no unknown")
	}
	// Old kernel without the counters and without bytes_retrans: unknown.
	old := &snapshot.Snapshot{Taken: time.Unix(5, 0), Sockets: []snapshot.Socket{est(1, &snapshot.TCPInfo{Len: snapshot.EndChrono}, nil)}}
	if _, err := retransmissions().Check(diag.NewInput(old, old, diag.Options{})); err == nil {
		t.Error("old kernel: no unknown")
	}
}

// SYN retransmits answering this namespace's own listener drops (a full
// accept queue, clients on the same host) are no lossy path; the rest
// still is.
func TestRetransSynFromListenDrops(t *testing.T) {
	prev := &snapshot.Snapshot{Taken: time.Unix(0, 0), Counters: map[string]int64{"Tcp.OutSegs": 0, "Tcp.RetransSegs": 0, "TcpExt.TCPSynRetrans": 0, "TcpExt.ListenDrops": 0}}
	at := func(out, re, syn, drops int64) *snapshot.Snapshot {
		return &snapshot.Snapshot{Taken: time.Unix(3, 0), Counters: map[string]int64{"Tcp.OutSegs": out, "Tcp.RetransSegs": re, "TcpExt.TCPSynRetrans": syn, "TcpExt.ListenDrops": drops}}
	}
	host := func(cur *snapshot.Snapshot) *diag.Finding {
		fs, _ := retransmissions().Check(diag.NewInput(prev, cur, diag.Options{}))
		for i := range fs {
			if strings.HasPrefix(fs[i].Summary, "host-wide") {
				return &fs[i]
			}
		}
		return nil
	}
	// The haproxy corpus case's window: 198 of 1094, all SYNs, 99 clients
	// dropped twice.
	if f := host(at(1094, 198, 198, 250)); f != nil {
		t.Errorf("SYN retransmits to a full local listener: %s", f.Summary)
	}
	// No listener dropped anything: the SYNs were lost on a path.
	if f := host(at(1094, 198, 198, 0)); f == nil || f.Severity != diag.Critical {
		t.Errorf("SYNs lost without listener drops: %+v", f)
	}
	// Drops explain 100 of them; 98 of 1094 are still 9%.
	if f := host(at(1094, 198, 198, 100)); f == nil || f.Severity != diag.Critical || !strings.Contains(f.Summary, "(98 of 1094") {
		t.Errorf("partly explained: %+v", f)
	}
}

func TestFmtRTT(t *testing.T) {
	for d, want := range map[time.Duration]string{60 * time.Microsecond: "60µs", 2500 * time.Microsecond: "2.5ms", 20400 * time.Microsecond: "20ms", 0: "0µs"} {
		if got := units.RTT(d); got != want {
			t.Errorf("units.RTT(%v) = %q, want %q", d, got, want)
		}
	}
}

// A writer descheduled at the second sample leaves its pinned buffer
// short of full at that instant. The recorded C3 sender with the second
// sample's queue cut to a quarter of sndbuf: the first sample still shows
// the limit, busy time and throughput cover the window, so a warning that
// says which sample showed it. With neither sample full: quiet.
func TestSndbufLimitedFirstSampleOnly(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "sndbuf-limited", "fires.jsonl"))
	sender := func(s *snapshot.Snapshot) *snapshot.Socket {
		for i := range s.Sockets {
			if sk := &s.Sockets[i]; sk.Cookie == 625841 && sk.Mem != nil {
				return sk
			}
		}
		t.Fatal("no sender in the fixture")
		return nil
	}
	run := func() diag.Result {
		var res diag.Result
		diag.Run([]diag.Rule{sndbufLimited()}, diag.NewInput(snaps[0], snaps[1], diag.Options{}), &res)
		return res
	}
	c := sender(snaps[1])
	c.Mem.WmemQueued = c.Mem.Sndbuf / 4
	res := run()
	if res.Worst() != diag.Warning || len(res.Findings) != 1 || !strings.Contains(res.Findings[0].Summary, "limited in the first sample") {
		t.Fatalf("worst %v, want a warning from the first sample: %+v", res.Worst(), res.Findings)
	}
	p := sender(snaps[0])
	p.Mem.WmemQueued = p.Mem.Sndbuf / 4
	if res := run(); len(res.Findings) != 0 {
		t.Errorf("neither sample full: %+v", res.Findings)
	}
}

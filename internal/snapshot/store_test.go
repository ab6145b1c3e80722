// SPDX-License-Identifier: Apache-2.0

package snapshot

import "testing"

// TestKeepSame: a connection that moved nothing holds its earlier
// sample's tcp_info and meminfo; one counter or one buffer that changed
// gets its own copy, and so does a different or re-used connection.
func TestKeepSame(t *testing.T) {
	info := TCPInfo{Len: SizeKnown, BytesAcked: 1000, SegsOut: 10, RTT: 50, LastDataSent: 200, LastAckRecv: 180}
	mem := MemInfo{Rcvbuf: 131072, Sndbuf: 87040}
	var st Store
	kept := st.Keep(&Socket{State: Established, Cookie: 7, Info: TCPOf(&info), Mem: &mem})
	base := kept.Was()
	var tb TCPInfo
	if kept.Info.own() != nil || kept.TCP(&tb) == nil || tb != info {
		t.Fatalf("kept: Info %v, packed %+v, want packed %+v", kept.Info.own(), tb, info)
	}

	idle := info
	idle.LastDataSent, idle.LastAckRecv, idle.LastDataRecv, idle.LastAckSent = 1200, 1180, 1190, 1170
	got := st.KeepSame(&Socket{State: Established, Cookie: 7, Info: TCPOf(&idle), Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 87040}}, &base)
	if !got.SharesTCP(&base) || got.Mem != base.Mem || *got.TCP(&tb) != info {
		t.Errorf("idle connection: info shared %v (%+v), mem shared %v; want both, with the base's ages", got.SharesTCP(&base), tb, got.Mem == base.Mem)
	}

	sent := idle
	sent.SegsOut++
	got = st.KeepSame(&Socket{State: Established, Cookie: 7, Info: TCPOf(&sent), Mem: &MemInfo{Rcvbuf: 262144, Sndbuf: 87040}}, &base)
	if got.SharesTCP(&base) || *got.TCP(&tb) != sent || got.Mem == base.Mem || got.Mem.Rcvbuf != 262144 {
		t.Errorf("changed connection shares: info %+v mem %+v", tb, got.Mem)
	}
	got = st.KeepSame(&Socket{State: Established, Cookie: 7, Info: TCPOf(&sent), Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 87040}}, &base)
	if got.SharesTCP(&base) || got.Mem != base.Mem {
		t.Errorf("new segment, same buffers: info shared %v (want not), mem shared %v (want)", got.SharesTCP(&base), got.Mem == base.Mem)
	}
	for _, other := range []Socket{
		{State: Established, Cookie: 8, Info: TCPOf(&idle), Mem: &mem},
		{State: CloseWait, Cookie: 7, Info: TCPOf(&idle), Mem: &mem},
	} {
		if got := st.KeepSame(&other, &base); got.SharesTCP(&base) {
			t.Errorf("cookie %d state %v shares the base's tcp_info", other.Cookie, other.State)
		}
	}
	if got := st.KeepSame(&Socket{State: Established, Cookie: 7, Info: TCPOf(&idle)}, nil); got.TCP(&tb) == nil || tb != idle || got.Mem != nil {
		t.Errorf("no base: %+v", got)
	}
	if got := st.Keep(&Socket{State: TimeWait, Cookie: 9}); got.HasTCP() || got.TCP(&tb) != nil {
		t.Errorf("no tcp_info kept as one: %+v", got)
	}
}

// TestKeepSharesMemInfo: sockets with equal meminfo share one stored
// value, up to memShared distinct values; past that a new value gets a
// copy of its own, and a stored value is never changed by a later Keep.
func TestKeepSharesMemInfo(t *testing.T) {
	var st Store
	a := st.Keep(&Socket{Cookie: 1, Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 16384}})
	b := st.Keep(&Socket{Cookie: 2, Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 16384}})
	c := st.Keep(&Socket{Cookie: 3, Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 16384, WmemQueued: 1}})
	if a.Mem != b.Mem || a.Mem == c.Mem || c.Mem.WmemQueued != 1 || a.Mem.WmemQueued != 0 {
		t.Errorf("equal meminfo not shared or different shared: a %p %+v b %p c %p %+v", a.Mem, *a.Mem, b.Mem, c.Mem, *c.Mem)
	}
	for i := range memShared {
		st.Keep(&Socket{Mem: &MemInfo{Drops: uint32(i) + 1}})
	}
	if n := len(st.memOf); n != memShared {
		t.Errorf("%d values looked up, want the bound %d", n, memShared)
	}
	x := st.Keep(&Socket{Mem: &MemInfo{Drops: 1 << 20}})
	y := st.Keep(&Socket{Mem: &MemInfo{Drops: 1 << 20}})
	if x.Mem == y.Mem || *x.Mem != *y.Mem {
		t.Errorf("past the bound: shared %v, values %+v %+v", x.Mem == y.Mem, *x.Mem, *y.Mem)
	}
	if z := st.Keep(&Socket{Mem: &MemInfo{Rcvbuf: 131072, Sndbuf: 16384}}); z.Mem != a.Mem {
		t.Error("a value stored before the bound is not shared after it")
	}
}

// TestFollow: sockets are found at or a little after the last match, not
// before it nor past the look-ahead.
func TestFollow(t *testing.T) {
	prev := make([]Was, 40)
	for i := range prev {
		prev[i].Cookie = uint64(i + 1)
	}
	f := Follow(prev)
	for _, c := range []struct {
		cookie uint64
		at     int
		ok     bool
	}{{1, 0, true}, {3, 2, true}, {2, 0, false}, {100, 0, false}, {3 + FollowAhead, 2 + FollowAhead, true}, {40, 0, false}} {
		at, ok := f.Next(c.cookie)
		if at != c.at || ok != c.ok {
			t.Errorf("cookie %d: at %d ok %v, want %d %v", c.cookie, at, ok, c.at, c.ok)
		}
	}
	empty := Follow(nil)
	if _, ok := empty.Next(1); ok {
		t.Error("empty: found")
	}
}

// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Real recordings (internal/testkit/livetest with LIVETEST_RECORD): one bulk flow
// over a 30 ms, 100 Mbit/s path into a client whose SO_RCVBUF is pinned at
// 128K (C5), or autotuned. fires.jsonl is cubic (rwnd_limited 99 %).
func TestRwndLimitedRecordings(t *testing.T) {
	r := rwndLimited()
	dir := filepath.Join("testdata", r.ID)
	for _, c := range []struct {
		file string
		bw   float64
		sev  diag.Severity // 0: quiet
	}{
		// Window-limited flows lose performance: a warning (critical is
		// kept for things that fail).
		{"fires.jsonl", 0, diag.Warning},
		// bbr: rwnd_limited only 20 % of busy, but 152-164K in flight of a
		// 168K window with cwnd 400K: the window is the limit.
		{"fires-bbr.jsonl", 0, diag.Warning},
		{"fires-bbr.jsonl", 100e6, diag.Warning},
		// A local receiver pinned at 32K that reads slowly (loopback): its
		// Recv-Q holds its buffer, so the reader, not the window, is the
		// limit; a note here, slow-reader speaks for the reader.
		{"fires-local.jsonl", 0, diag.Info},
		// grpc-java's one channel (corpus case "grpc-java, one channel, 32K
		// buffers"): the client's receive buffer at tcp_rmem's 32K maximum
		// advertises 20352 then 18944 bytes, in flight fills it in both
		// samples; the window wobbles with each read, but its size is the
		// limit (it was info while the two had to be equal).
		{"fires-grpc-32k.jsonl", 0, diag.Warning},
		// Autotuned receivers: the window is many times what is in flight.
		{"quiet.jsonl", 0, 0},
		{"quiet-bbr.jsonl", 0, 0},
		{"quiet-bbr.jsonl", 100e6, 0},
	} {
		res := runFixtureOpts(t, r, filepath.Join(dir, c.file), diag.Options{Bandwidth: c.bw})
		if len(res.Unknown) > 0 {
			t.Errorf("%s: unknown %+v", c.file, res.Unknown)
		}
		got := res.Worst()
		if c.sev == 0 && got >= diag.Warning || c.sev != 0 && got != c.sev {
			t.Errorf("%s --bandwidth %.0f: worst %v, want %v: %+v", c.file, c.bw, got, c.sev, res.Findings)
		}
	}
}

// In flight is read at one instant per sample; a window-limited flow can
// be caught between bursts. The bbr recording with the first sample's in
// flight cut to 40 % of the window: the unchanged window still bounds the
// rate over the 2 s (10.5M acked, 92 % of 168K per 30 ms), so a warning.
// With the window moved between the samples, that proof is gone.
func TestRwndLimitedBoundAcrossSamples(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "rwnd-limited", "fires-bbr.jsonl"))
	find := func(s *snapshot.Snapshot) *snapshot.TCPInfo {
		var tb snapshot.TCPInfo
		for i := range s.Sockets {
			sk := &s.Sockets[i]
			if ti := sk.TCP(&tb); sk.State == snapshot.Established && ti != nil && ti.BytesAcked > 1e6 {
				c := *ti
				sk.Info = snapshot.TCPOf(&c) // unpacked, so that the test can change it
				return &c
			}
		}
		t.Fatal("no sender in the fixture")
		return nil
	}
	p, c := find(snaps[0]), find(snaps[1])
	p.Unacked = uint32(0.4 * float64(p.SndWnd) / float64(p.SndMSS))
	run := func() diag.Result {
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, diag.NewInput(snaps[0], snaps[1], diag.Options{}), &res)
		return res
	}
	res := run()
	if got := res.Worst(); got != diag.Warning || len(res.Findings) != 1 || !strings.Contains(res.Findings[0].Summary, "unchanged receive window bounds the rate") {
		t.Fatalf("worst %v, want a warning from the bounded rate: %+v", got, res.Findings)
	}
	for _, e := range res.Findings[0].Evidence {
		if e.Name == "window is the limit" {
			t.Log(e.Value) // go test -v prints the share of the window moved per RTT
		}
	}
	c.SndWnd += 64 << 10
	if res := run(); res.Worst() >= diag.Warning {
		t.Errorf("window moved: worst %v, want below warning", res.Worst())
	}
}

// Both ends on one host, in two namespaces: the loopback-free recording
// of a local receiver split in two, the receiver's socket moved to a
// namespace of its own whose process is in a pod. Diagnosed with the
// other namespace at hand (check --all-netns), the sender's finding names
// the receiver (subject.peer: namespace, process, pod, container), its
// buffer, and addresses the receiver's fixes to it; without it, the
// receiver is only "the remote receiver".
func TestRwndLimitedPeerInAnotherNamespace(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "rwnd-limited", "fires-local.jsonl"))
	prev, cur := snaps[0], snaps[len(snaps)-1]
	var sender *snapshot.Socket
	var tb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if ti := sk.TCP(&tb); sk.State == snapshot.Established && ti != nil && ti.BytesAcked > 1e6 {
			sender = sk
		}
	}
	if sender == nil {
		t.Fatal("no sender in the fixture")
	}
	local, remote := sender.Local, sender.Remote
	if local.Addr().IsLoopback() {
		// Pod addresses: a loopback peer is always in its own namespace.
		t.Log("fixture on loopback: moving both ends to 198.18.7.1/.2")
	}
	a, b := netip.MustParseAddr("198.18.7.1"), netip.MustParseAddr("198.18.7.2")
	move := func(s *snapshot.Snapshot) (*snapshot.Snapshot, *snapshot.Snapshot) {
		snd, rcv := *s, *s
		snd.Sockets, rcv.Sockets = nil, nil
		rcv.Netns = snapshot.Netns{Name: "cni-receiver", Inode: s.Netns.Inode + 1}
		for _, sk := range s.Sockets {
			switch {
			case sk.Local == local && sk.Remote == remote:
				sk.Local, sk.Remote = snapshot.EndpointOf(netip.AddrPortFrom(a, local.Port())), snapshot.EndpointOf(netip.AddrPortFrom(b, remote.Port()))
				snd.Sockets = append(snd.Sockets, sk)
			case sk.Local == remote && sk.Remote == local:
				sk.Local, sk.Remote = snapshot.EndpointOf(netip.AddrPortFrom(b, remote.Port())), snapshot.EndpointOf(netip.AddrPortFrom(a, local.Port()))
				rcv.Sockets = append(rcv.Sockets, sk)
			}
		}
		rcv.Procs = map[int]*snapshot.Proc{}
		for pid, p := range s.Procs {
			q := *p
			q.Workload = &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}
			rcv.Procs[pid] = &q
		}
		return &snd, &rcv
	}
	prevA, _ := move(prev)
	curA, curB := move(cur)
	run := func(host bool) diag.Finding {
		in := diag.NewInput(prevA, curA, diag.Options{})
		if host {
			in.Host = tcpmodel.NewHostPeers([]*snapshot.Snapshot{curA, curB})
		}
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, in, &res)
		if len(res.Findings) != 1 {
			t.Fatalf("host %v: %d findings: %+v", host, len(res.Findings), res.Findings)
		}
		return res.Findings[0]
	}
	if f := run(false); f.Subject.Peer != nil || !strings.Contains(f.Summary, "the remote receiver") {
		t.Errorf("without the other namespace: peer %+v, summary %s", f.Subject.Peer, f.Summary)
	}
	f := run(true)
	pe := f.Subject.Peer
	if pe == nil || pe.Netns != "cni-receiver" || pe.Workload.PodName() != "shop/web-1" || pe.Workload.ContainerName() != "api" || pe.Pid == 0 || pe.Command == "" {
		t.Fatalf("peer %+v, want the receiver's namespace, pid, command, pod shop/web-1 container api", pe)
	}
	name := pe.String()
	if !strings.Contains(name, "in pod shop/web-1 container api, netns cni-receiver") || !strings.Contains(f.Summary, "on this host: "+name) {
		t.Errorf("summary %q does not name %q", f.Summary, name)
	}
	if v := evidence(f, "receiver"); !strings.HasPrefix(v, name+": rcvbuf ") {
		t.Errorf("receiver evidence %q", v)
	}
	for _, fx := range f.Fixes {
		if fx.Peer && strings.Contains(fx.Text, "receiver side") && !strings.Contains(fx.Text, name) {
			t.Errorf("receiver's fix not addressed to it: %s", fx.Text)
		}
	}
}

// TestRwndReceiverAtRmemMax (issue 38 item 5): a real recording
// (TestReceiveBufferAtRmemMax in internal/testkit/livetest, LIVETEST_RECORD)
// of a bulk sender in one namespace into a receiver in another of the same
// host, through a 40 ms, 100 Mbit/s link, the receiver's namespace
// capping receive autotuning at 64K (net.ipv4.tcp_rmem max) and neither
// end calling setsockopt (the lock bits read: not set). The finding
// says the buffer is at tcp_rmem's maximum, names that sysctl with a
// larger maximum in the receiver's namespace, and never says pinned or
// stop pinning; given the path's rate (--bandwidth 100mbit), the maximum
// asked for is twice the BDP (over 500K at the recorded RTT), rounded up:
// 2M (bdp.For).
func TestRwndReceiverAtRmemMax(t *testing.T) {
	dir := filepath.Join("testdata", "rwnd-limited")
	cs, ss := readFixture(t, filepath.Join(dir, "fires-rmem-max-client.jsonl")), readFixture(t, filepath.Join(dir, "fires-rmem-max-server.jsonl"))
	for _, c := range []struct {
		bw  float64
		max string
	}{{0, "131072"}, {100e6, "2097152"}} {
		in := diag.NewInput(cs[0], cs[1], diag.Options{Bandwidth: c.bw})
		in.Host = tcpmodel.NewHostPeers([]*snapshot.Snapshot{cs[1], ss[1]})
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, in, &res)
		if len(res.Findings) != 1 {
			t.Fatalf("bandwidth %g: %d findings: %+v", c.bw, len(res.Findings), res.Findings)
		}
		f := res.Findings[0]
		if f.Severity != diag.Warning || !strings.Contains(f.Summary, "its receive buffer at net.ipv4.tcp_rmem's maximum 64K (autotuned, not set by the application)") {
			t.Errorf("bandwidth %g: %s %s", c.bw, f.Severity, f.Summary)
		}
		if v := evidence(f, "autotuning maximum"); !strings.HasPrefix(v, "rcvbuf at net.ipv4.tcp_rmem's maximum 64K: autotuning can grow it no further; not pinned") {
			t.Errorf("bandwidth %g: autotuning maximum %q", c.bw, v)
		}
		named := false
		for _, fx := range f.Fixes {
			if strings.Contains(fx.Text, "stop pinning") || strings.Contains(fx.Text, "SO_RCVBUF") {
				t.Errorf("bandwidth %g: fix for a pinned buffer: %s", c.bw, fx.Text)
			}
			for _, sc := range fx.Sysctls {
				if v := strings.Fields(sc.Value); sc.Name == "net.ipv4.tcp_rmem" && len(v) == 3 {
					named = named || v[2] == c.max && fx.Peer && strings.Contains(fx.Text, "receiver side")
				}
			}
		}
		if !named {
			t.Errorf("bandwidth %g: no fix raises net.ipv4.tcp_rmem's maximum to %s on the receiver's side: %+v", c.bw, c.max, f.Fixes)
		}
	}
}

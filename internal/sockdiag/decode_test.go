// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// decodeFixture decodes a captured dump through parseDump.
func decodeFixture(t testing.TB, name string) []*snapshot.Socket {
	t.Helper()
	seq, dgrams := readHex(t, filepath.Join("testdata", "dump_"+name+".hex"))
	var out []*snapshot.Socket
	base := 0
	for i, d := range dgrams {
		done, err := parseDump(d, seq, base, func(sk *snapshot.Socket) error { out = append(out, sk); return nil })
		if err != nil {
			t.Fatalf("%s datagram %d: %v", name, i+1, err)
		}
		if done != (i == len(dgrams)-1) {
			t.Fatalf("%s datagram %d of %d: done %v", name, i+1, len(dgrams), done)
		}
		base += len(d)
	}
	return out
}

// ssSocket is one socket as `ss -tainme` printed it.
type ssSocket struct {
	state, recvQ, sendQ, local, peer string
	tokens                           []string
}

func readSS(t testing.TB, name string) []ssSocket {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "dump_"+name+".ss"))
	if err != nil {
		t.Fatal(err)
	}
	var out []ssSocket
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			out[len(out)-1].tokens = append(out[len(out)-1].tokens, f...)
			continue
		}
		if len(f) < 5 {
			t.Fatalf("ss line %q", line)
		}
		out = append(out, ssSocket{state: f[0], recvQ: f[1], sendQ: f[2], local: f[3], peer: f[4], tokens: f[5:]})
	}
	return out
}

// ssAddr renders an address the way ss -n does.
func ssAddr(ap netip.AddrPort) string {
	port := strconv.Itoa(int(ap.Port()))
	if ap.Port() == 0 {
		port = "*"
	}
	a := ap.Addr()
	switch {
	case a.Is4():
		return a.String() + ":" + port
	case a.IsUnspecified() && port != "*":
		return "*:" + port // dual-stack wildcard
	case a.IsUnspecified():
		return "[::]:" + port
	}
	return "[" + a.String() + "]:" + port
}

// ssPeer renders the peer; a dual-stack listener's is "*:*".
func ssPeer(s *snapshot.Socket) string {
	if strings.HasPrefix(ssAddr(s.Local.AddrPort()), "*:") && s.Remote.Addr().IsUnspecified() && s.Remote.Port() == 0 {
		return "*:*"
	}
	return ssAddr(s.Remote.AddrPort())
}

// ssValues renders decoded fields as ss prints them, keyed by ss's names.
func ssValues(s *snapshot.Socket) map[string]string {
	g := func(us uint32) string { return strconv.FormatFloat(float64(us)/1000, 'g', 6, 64) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	m := map[string]string{
		"ino": u(uint64(s.Inode)),
		"sk":  strconv.FormatUint(s.Cookie, 16),
	}
	if s.UID != 0 {
		m["uid"] = u(uint64(s.UID))
	}
	if mem := s.Mem; mem != nil {
		m["skmem"] = fmt.Sprintf("(r%d,rb%d,t%d,tb%d,f%d,w%d,o%d,bl%d,d%d)", mem.RmemAlloc, mem.Rcvbuf,
			mem.WmemAlloc, mem.Sndbuf, mem.FwdAlloc, mem.WmemQueued, mem.Optmem, mem.Backlog, mem.Drops)
	}
	if in := s.TCP(nil); in != nil {
		m["wscale"] = fmt.Sprintf("%d,%d", in.SndWscale, in.RcvWscale)
		m["rto"] = g(in.RTO)
		m["rtt"] = g(in.RTT) + "/" + g(in.RTTVar)
		m["ato"] = g(in.ATO)
		m["minrtt"] = g(in.MinRTT)
		m["busy"] = u(in.BusyTime/1000) + "ms"
		for k, v := range map[string]uint64{
			"mss": uint64(in.SndMSS), "pmtu": uint64(in.PMTU), "rcvmss": uint64(in.RcvMSS),
			"advmss": uint64(in.AdvMSS), "cwnd": uint64(in.SndCwnd), "unacked": uint64(in.Unacked),
			"bytes_sent": in.BytesSent, "bytes_acked": in.BytesAcked, "bytes_received": in.BytesReceived,
			"segs_out": uint64(in.SegsOut), "segs_in": uint64(in.SegsIn),
			"data_segs_out": uint64(in.DataSegsOut), "data_segs_in": uint64(in.DataSegsIn),
			"delivered": uint64(in.Delivered), "rcv_space": uint64(in.RcvSpace),
			"rcv_ssthresh": uint64(in.RcvSsthresh), "snd_wnd": uint64(in.SndWnd),
		} {
			m[k] = u(v)
		}
	}
	return m
}

// ss prints these only when non-zero.
var ssOmitsZero = []string{"ato", "unacked", "bytes_sent", "bytes_acked", "bytes_received",
	"segs_out", "segs_in", "data_segs_out", "data_segs_in", "delivered"}

// TestDecodeCaptured checks every captured socket field by field against
// ss's view of the same namespace, taken right after the capture.
func TestDecodeCaptured(t *testing.T) {
	for _, c := range captures {
		t.Run(c.name, func(t *testing.T) {
			socks := decodeFixture(t, c.name)
			ss := readSS(t, c.name)
			if len(socks) != len(ss) || len(socks) == 0 {
				t.Fatalf("decoded %d sockets, ss shows %d", len(socks), len(ss))
			}
			used := map[*snapshot.Socket]bool{}
			for _, want := range ss {
				var s *snapshot.Socket
				for _, x := range socks {
					if !used[x] && x.State.String() == want.state && ssAddr(x.Local.AddrPort()) == want.local && ssPeer(x) == want.peer {
						s = x
						break
					}
				}
				if s == nil {
					t.Errorf("no decoded socket for ss %s %s %s", want.state, want.local, want.peer)
					continue
				}
				used[s] = true
				if s.Family != c.family {
					t.Errorf("%s: family %d", want.local, s.Family)
				}
				if strconv.Itoa(int(s.RecvQ)) != want.recvQ || strconv.Itoa(int(s.SendQ)) != want.sendQ {
					t.Errorf("%s %s: queues %d/%d, ss %s/%s", want.local, want.peer, s.RecvQ, s.SendQ, want.recvQ, want.sendQ)
				}
				got := ssValues(s)
				seen := map[string]bool{}
				var appLimited, ts, sack, cc bool
				for _, tok := range want.tokens {
					switch tok {
					case "app_limited":
						appLimited = true
					case "ts":
						ts = true
					case "sack":
						sack = true
					case "bbr", "cubic", "reno":
						cc = true
						if s.CC.String() != tok {
							t.Errorf("%s %s: cc %q, ss %q", want.local, want.peer, s.CC, tok)
						}
					}
					k, v, ok := strings.Cut(tok, ":")
					if !ok {
						continue
					}
					seen[k] = true
					if g, ok := got[k]; ok && g != v {
						t.Errorf("%s %s: %s %s, ss %s", want.local, want.peer, k, g, v)
					}
				}
				if s.TCP(nil) != nil {
					if appLimited != s.TCP(nil).DeliveryRateAppLimited || ts != (s.TCP(nil).Options&1 != 0) || sack != (s.TCP(nil).Options&2 != 0) || !cc {
						t.Errorf("%s %s: app_limited %v options %#x cc %q; ss %v", want.local, want.peer, s.TCP(nil).DeliveryRateAppLimited, s.TCP(nil).Options, s.CC, want.tokens)
					}
					for _, k := range ssOmitsZero {
						if !seen[k] && got[k] != "0" && got[k] != "0ms" {
							t.Errorf("%s %s: %s %s, ss shows none", want.local, want.peer, k, got[k])
						}
					}
				}
			}
		})
	}
}

// TestDecodeCapturedShapes checks facts about the scenario that ss does not
// print, or prints in a form compared loosely above.
func TestDecodeCapturedShapes(t *testing.T) {
	kinds := map[string]int{}
	for _, c := range captures {
		for _, s := range decodeFixture(t, c.name) {
			switch {
			case s.State == snapshot.Listen:
				kinds["listen"]++
				if s.SendQ != 50 || s.TCP(nil) == nil || s.TCP(nil).Len < snapshot.SizeKnown || s.TCP(nil).Sacked != s.SendQ || s.TCP(nil).Unacked != s.RecvQ {
					t.Errorf("listener %v: Send-Q %d info %+v", s.Local, s.SendQ, s.TCP(nil))
				}
			case s.State == snapshot.SynRecv:
				kinds["synrecv"]++
				if s.TCP(nil) != nil || s.Mem != nil || s.Inode != 0 || s.Timer != 1 || s.Local.Port() == 0 || s.Remote.Port() == 0 {
					t.Errorf("SYN-RECV %v: %+v", s.Local, s)
				}
			case s.State == snapshot.TimeWait:
				kinds["timewait"]++
				if s.TCP(nil) != nil || s.Mem != nil || s.Shutdown.Known() || !s.CC.IsZero() || s.Inode != 0 || s.Timer != 3 {
					t.Errorf("TIME-WAIT %v: %+v", s.Local, s)
				}
			case s.Local.Addr().Is4In6():
				kinds["mapped"]++
			case s.State == snapshot.FinWait2:
				kinds["finwait2"]++
				if !s.Shutdown.Known() || s.Shutdown.Bits() != 2 {
					t.Errorf("FIN-WAIT-2 shutdown %v, want 2", s.Shutdown)
				}
			case s.State == snapshot.CloseWait:
				kinds["closewait"]++
				if !s.Shutdown.Known() || s.Shutdown.Bits() != 1 || s.RecvQ != 1 {
					t.Errorf("CLOSE-WAIT shutdown %v Recv-Q %d, want 1 1", s.Shutdown, s.RecvQ)
				}
			}
			if s.TCP(nil) != nil && s.TCP(nil).State != uint8(s.State) {
				t.Errorf("%v %v: tcp_info state %d", s.Local, s.State, s.TCP(nil).State)
			}
		}
	}
	want := map[string]int{"listen": 4, "synrecv": 1, "timewait": 3, "mapped": 1, "finwait2": 1, "closewait": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%s sockets: %d, want %d", k, kinds[k], n)
		}
	}
}

// TestDecodeTCPInfoLayout checks field offsets against x/sys/unix's
// TCPInfo (generated from the kernel header) by filling each byte with
// its own index.
func TestDecodeTCPInfoLayout(t *testing.T) {
	var raw unix.TCPInfo
	b := unsafe.Slice((*byte)(unsafe.Pointer(&raw)), unsafe.Sizeof(raw))
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	got := DecodeTCPInfo(b)
	if int(got.Len) != len(b) {
		t.Errorf("Len %d, want %d", got.Len, len(b))
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"state", uint64(got.State), uint64(raw.State)},
		{"ca_state", uint64(got.CAState), uint64(raw.Ca_state)},
		{"wscale", uint64(got.SndWscale | got.RcvWscale<<4), uint64(b[6])},
		{"rto", uint64(got.RTO), uint64(raw.Rto)},
		{"rcv_mss", uint64(got.RcvMSS), uint64(raw.Rcv_mss)},
		{"last_ack_recv", uint64(got.LastAckRecv), uint64(raw.Last_ack_recv)},
		{"rtt", uint64(got.RTT), uint64(raw.Rtt)},
		{"snd_cwnd", uint64(got.SndCwnd), uint64(raw.Snd_cwnd)},
		{"total_retrans", uint64(got.TotalRetrans), uint64(raw.Total_retrans)},
		{"pacing_rate", got.PacingRate, raw.Pacing_rate},
		{"bytes_received", got.BytesReceived, raw.Bytes_received},
		{"segs_in", uint64(got.SegsIn), uint64(raw.Segs_in)},
		{"data_segs_out", uint64(got.DataSegsOut), uint64(raw.Data_segs_out)},
		{"delivery_rate", got.DeliveryRate, raw.Delivery_rate},
		{"busy_time", got.BusyTime, raw.Busy_time},
		{"sndbuf_limited", got.SndbufLimited, raw.Sndbuf_limited},
		{"delivered_ce", uint64(got.DeliveredCE), uint64(raw.Delivered_ce)},
		{"bytes_retrans", got.BytesRetrans, raw.Bytes_retrans},
		{"rcv_ooopack", uint64(got.RcvOOOPack), uint64(raw.Rcv_ooopack)},
		{"snd_wnd", uint64(got.SndWnd), uint64(raw.Snd_wnd)},
		{"rcv_wnd", uint64(got.RcvWnd), uint64(raw.Rcv_wnd)},
		{"rehash", uint64(got.Rehash), uint64(raw.Rehash)},
		{"total_rto", uint64(got.TotalRTO), uint64(raw.Total_rto)},
		{"total_rto_recoveries", uint64(got.TotalRTORecoveries), uint64(raw.Total_rto_recoveries)},
		{"total_rto_time", uint64(got.TotalRTOTime), uint64(raw.Total_rto_time)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestDecodeTCPInfoShort(t *testing.T) {
	b := make([]byte, 104) // a Linux 3.x tcp_info: up to total_retrans
	for i := range b {
		b[i] = 0xff
	}
	got := DecodeTCPInfo(b)
	if got.Len != 104 || got.TotalRetrans != 0xffffffff || got.PacingRate != 0 || got.Has(snapshot.EndPacingRate) {
		t.Errorf("short tcp_info: %+v", got)
	}
	if z := DecodeTCPInfo(nil); z.Len != 0 || z.RTT != 0 {
		t.Errorf("empty tcp_info: %+v", z)
	}
	// byte 7: bit 0 app_limited, bits 1-2 fastopen_client_fail
	b = make([]byte, 8)
	b[6], b[7] = 0x7a, 0x05
	got = DecodeTCPInfo(b)
	if got.SndWscale != 0xa || got.RcvWscale != 7 || !got.DeliveryRateAppLimited || got.FastopenClientFail != 2 {
		t.Errorf("bitfields: %+v", got)
	}
}

// TestTruncated cuts a captured datagram in the middle of its third
// message: the first two sockets arrive, then an error naming the offset.
func TestTruncated(t *testing.T) {
	seq, dgrams := readHex(t, filepath.Join("testdata", "dump_inet.hex"))
	d := dgrams[0]
	var starts []int
	for off := 0; off+nlmsgHdrLen <= len(d); off += int(ne.Uint32(d[off:])+3) &^ 3 {
		starts = append(starts, off)
	}
	if len(starts) < 4 {
		t.Fatalf("fixture has %d messages in its first datagram", len(starts))
	}
	for _, cut := range []int{starts[2] + 3, starts[2] + nlmsgHdrLen + 40, starts[3] - 1} {
		n := 0
		done, err := parseDump(d[:cut], seq, 1000, func(*snapshot.Socket) error { n++; return nil })
		if err == nil || done || n != 2 {
			t.Errorf("cut at %d: done %v err %v after %d sockets", cut, done, err, n)
			continue
		}
		if want := fmt.Sprintf("offset %d:", 1000+starts[2]); !strings.HasPrefix(err.Error(), want) {
			t.Errorf("cut at %d: %q does not start with %q", cut, err, want)
		}
	}
}

func TestParseDumpErrors(t *testing.T) {
	msg := func(typ uint16, seq uint32, body []byte) []byte {
		b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
		ne.PutUint32(b, uint32(nlmsgHdrLen+len(body)))
		ne.PutUint16(b[4:], typ)
		ne.PutUint32(b[8:], seq)
		b = append(b, body...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	le32 := func(v int32) []byte { return ne.AppendUint32(nil, uint32(v)) }
	none := func(*snapshot.Socket) error { t.Error("unexpected socket"); return nil }

	if done, err := parseDump(msg(nlmsgDone, 7, le32(0)), 7, 0, none); !done || err != nil {
		t.Errorf("DONE: %v %v", done, err)
	}
	if _, err := parseDump(msg(nlmsgError, 7, le32(-int32(unix.EPERM))), 7, 0, none); !errors.Is(err, unix.EPERM) {
		t.Errorf("NLMSG_ERROR: %v", err)
	}
	if done, err := parseDump(msg(nlmsgDone, 7, le32(-int32(unix.EINTR))), 7, 0, none); !done || !errors.Is(err, unix.EINTR) {
		t.Errorf("DONE with error: %v %v", done, err)
	}
	// Another dump's messages are skipped.
	if done, err := parseDump(bytes.Join([][]byte{msg(sockDiagByFam, 3, make([]byte, 10)), msg(nlmsgDone, 7, le32(0))}, nil), 7, 0, none); !done || err != nil {
		t.Errorf("foreign seq: %v %v", done, err)
	}
	short := msg(sockDiagByFam, 7, make([]byte, diagMsgLen-1))
	if _, err := parseDump(short, 7, 0, none); !errors.Is(err, errShortDiag) {
		t.Errorf("short inet_diag_msg: %v", err)
	}
	body := make([]byte, diagMsgLen+8)
	body[0] = unix.AF_INET
	ne.PutUint16(body[diagMsgLen:], 200) // attribute longer than what is left
	var sk snapshot.Socket
	if err := decodeMessage(body, &sk); !errors.Is(err, errBadAttr) {
		t.Errorf("long attribute: %v", err)
	}
}

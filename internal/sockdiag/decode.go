// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Wire sizes and numbers from include/uapi/linux/{netlink,inet_diag,sock_diag}.h.
const (
	nlmsgHdrLen   = 16 // struct nlmsghdr
	diagMsgLen    = 72 // struct inet_diag_msg
	diagReqLen    = 56 // struct inet_diag_req_v2
	rtaHdrLen     = 4  // struct rtattr
	nlmsgDone     = 3  // NLMSG_DONE
	nlmsgError    = 2  // NLMSG_ERROR
	sockDiagByFam = 20 // SOCK_DIAG_BY_FAMILY
	// tcpdiagGetSock (TCPDIAG_GETSOCK) is the compat request, and the
	// type of its replies; compatReqLen is its struct inet_diag_req.
	tcpdiagGetSock = 18
	compatReqLen   = 60

	attrInfo      = 2 // INET_DIAG_INFO
	attrCong      = 4 // INET_DIAG_CONG
	attrSkMemInfo = 7 // INET_DIAG_SKMEMINFO
	attrShutdown  = 8 // INET_DIAG_SHUTDOWN

	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

var ne = binary.NativeEndian

// littleEndian says how the compiler packs tcp_info's bitfields: from the
// low bit on little-endian machines, from the high bit on big-endian ones.
var littleEndian = ne.Uint16([]byte{1, 0}) == 1

// The decoding errors, wrapped with where they occurred.
var (
	errShortHeader = errors.New("truncated netlink header")
	errShortMsg    = errors.New("truncated message")
	errShortDiag   = errors.New("truncated inet_diag_msg")
	errBadAttr     = errors.New("malformed attribute")
)

// decoded is one inet_diag_msg before it is moved into memory the caller
// keeps, so that one allocation can hold a socket and its extras.
type decoded struct {
	sk      snapshot.Socket
	info    snapshot.TCPInfo
	mem     snapshot.MemInfo
	hasInfo bool
	hasMem  bool
}

// full holds a socket with all its extras in one allocation.
type full struct {
	sk   snapshot.Socket
	info snapshot.TCPInfo
	mem  snapshot.MemInfo
}

// socket returns a fresh Socket holding d, in one allocation when it can.
func (d *decoded) socket() *snapshot.Socket {
	if d.hasInfo && d.hasMem {
		return new(full).set(d)
	}
	sk := new(snapshot.Socket)
	d.fill(sk)
	return sk
}

// set copies d into f and returns f's socket pointing at f's extras; nil
// when f is nil.
func (f *full) set(d *decoded) *snapshot.Socket {
	if f == nil {
		return nil
	}
	f.sk, f.info, f.mem = d.sk, d.info, d.mem
	if d.hasInfo {
		f.sk.Info = snapshot.TCPOf(&f.info)
	}
	if d.hasMem {
		f.sk.Mem = &f.mem
	}
	return &f.sk
}

// fill copies d into sk, allocating the extras that are present.
func (d *decoded) fill(sk *snapshot.Socket) {
	*sk = d.sk
	if d.hasInfo {
		info := d.info
		sk.Info = snapshot.TCPOf(&info)
	}
	if d.hasMem {
		mem := d.mem
		sk.Mem = &mem
	}
}

// decodeMessage decodes one inet_diag_msg and its attributes (the payload
// of a SOCK_DIAG_BY_FAMILY netlink message) into sk.
func decodeMessage(b []byte, sk *snapshot.Socket) error {
	var d decoded
	if err := decodeInto(b, &d); err != nil {
		return err
	}
	d.fill(sk)
	return nil
}

func decodeInto(b []byte, d *decoded) error {
	if len(b) < diagMsgLen {
		return fmt.Errorf("%w: %d bytes, need %d", errShortDiag, len(b), diagMsgLen)
	}
	sk := &d.sk
	sk.Family = b[0]
	sk.State = snapshot.State(b[1])
	sk.Timer = b[2]
	sk.Retrans = b[3]
	sport := binary.BigEndian.Uint16(b[4:])
	dport := binary.BigEndian.Uint16(b[6:])
	switch sk.Family {
	case syscall.AF_INET:
		sk.Local = snapshot.Endpoint4([4]byte(b[8:12]), sport)
		sk.Remote = snapshot.Endpoint4([4]byte(b[24:28]), dport)
	case syscall.AF_INET6:
		sk.Local = snapshot.Endpoint6([16]byte(b[8:24]), sport)
		sk.Remote = snapshot.Endpoint6([16]byte(b[24:40]), dport)
	default:
		return fmt.Errorf("unknown address family %d", sk.Family)
	}
	sk.IfIndex = ne.Uint32(b[40:])
	sk.Cookie = uint64(ne.Uint32(b[48:]))<<32 | uint64(ne.Uint32(b[44:]))
	sk.Expires = ne.Uint32(b[52:])
	sk.RecvQ = ne.Uint32(b[56:])
	sk.SendQ = ne.Uint32(b[60:])
	sk.UID = ne.Uint32(b[64:])
	sk.Inode = ne.Uint32(b[68:])

	for off := diagMsgLen; off < len(b); {
		if len(b)-off < rtaHdrLen {
			// Trailing bytes shorter than an attribute header: the kernel
			// pads to 4, so anything else is damage.
			return fmt.Errorf("%w: %d trailing bytes at %d", errBadAttr, len(b)-off, off)
		}
		alen := int(ne.Uint16(b[off:]))
		typ := ne.Uint16(b[off+2:]) & nlaTypeMask
		if alen < rtaHdrLen || alen > len(b)-off {
			return fmt.Errorf("%w: length %d at %d, %d bytes left", errBadAttr, alen, off, len(b)-off)
		}
		v := b[off+rtaHdrLen : off+alen]
		switch typ {
		case attrInfo:
			d.info = DecodeTCPInfo(v)
			d.hasInfo = true
		case attrCong:
			sk.CC = ccName(v)
		case attrSkMemInfo:
			d.mem = decodeMemInfo(v)
			d.hasMem = true
		case attrShutdown:
			if len(v) >= 1 {
				sk.Shutdown = snapshot.FlagsOf(v[0])
			}
		}
		off += (alen + 3) &^ 3
	}
	return nil
}

// ccCubic and the others are the names most sockets use, interned once
// (never written): ccName returns them without a lookup.
var (
	ccBBR   = snapshot.CCOf("bbr")
	ccCubic = snapshot.CCOf("cubic")
	ccReno  = snapshot.CCOf("reno")
	ccDCTCP = snapshot.CCOf("dctcp")
)

// ccName returns the NUL-terminated congestion control name, without
// allocating or looking up the common ones.
func ccName(v []byte) snapshot.CC {
	for i, c := range v {
		if c == 0 {
			v = v[:i]
			break
		}
	}
	switch string(v) { // no allocation: the compiler compares in place
	case "bbr":
		return ccBBR
	case "cubic":
		return ccCubic
	case "reno":
		return ccReno
	case "dctcp":
		return ccDCTCP
	}
	return snapshot.CCOf(string(v))
}

// decodeMemInfo decodes the SK_MEMINFO_* u32 array; fields past a short
// array stay zero.
func decodeMemInfo(v []byte) snapshot.MemInfo {
	var a [9]uint32
	for i := range a {
		if len(v) < 4*(i+1) {
			break
		}
		a[i] = ne.Uint32(v[4*i:])
	}
	return snapshot.MemInfo{
		RmemAlloc: a[0], Rcvbuf: a[1], WmemAlloc: a[2], Sndbuf: a[3], FwdAlloc: a[4],
		WmemQueued: a[5], Optmem: a[6], Backlog: a[7], Drops: a[8],
	}
}

// DecodeTCPInfo decodes a struct tcp_info of any length (shorter ones from
// older kernels: missing fields zero and Len says how many bytes came;
// longer ones from newer kernels: extra ignored).
func DecodeTCPInfo(b []byte) snapshot.TCPInfo {
	var p [snapshot.SizeKnown]byte
	copy(p[:], b)
	t := snapshot.TCPInfo{
		Len:         uint16(min(len(b), 0xffff)),
		State:       p[0],
		CAState:     p[1],
		Retransmits: p[2],
		Probes:      p[3],
		Backoff:     p[4],
		Options:     p[5],
	}
	// __u8 tcpi_snd_wscale:4, tcpi_rcv_wscale:4;
	// __u8 tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2;
	if littleEndian {
		t.SndWscale, t.RcvWscale = p[6]&0xf, p[6]>>4
		t.DeliveryRateAppLimited = p[7]&1 != 0
		t.FastopenClientFail = p[7] >> 1 & 3
	} else {
		t.SndWscale, t.RcvWscale = p[6]>>4, p[6]&0xf
		t.DeliveryRateAppLimited = p[7]&0x80 != 0
		t.FastopenClientFail = p[7] >> 5 & 3
	}
	u32 := func(off int) uint32 { return ne.Uint32(p[off:]) }
	u64 := func(off int) uint64 { return ne.Uint64(p[off:]) }
	t.RTO = u32(8)
	t.ATO = u32(12)
	t.SndMSS = u32(16)
	t.RcvMSS = u32(20)
	t.Unacked = u32(24)
	t.Sacked = u32(28)
	t.Lost = u32(32)
	t.Retrans = u32(36)
	t.Fackets = u32(40)
	t.LastDataSent = u32(44)
	t.LastAckSent = u32(48)
	t.LastDataRecv = u32(52)
	t.LastAckRecv = u32(56)
	t.PMTU = u32(60)
	t.RcvSsthresh = u32(64)
	t.RTT = u32(68)
	t.RTTVar = u32(72)
	t.SndSsthresh = u32(76)
	t.SndCwnd = u32(80)
	t.AdvMSS = u32(84)
	t.Reordering = u32(88)
	t.RcvRTT = u32(92)
	t.RcvSpace = u32(96)
	t.TotalRetrans = u32(100)
	t.PacingRate = u64(104)
	t.MaxPacingRate = u64(112)
	t.BytesAcked = u64(120)
	t.BytesReceived = u64(128)
	t.SegsOut = u32(136)
	t.SegsIn = u32(140)
	t.NotsentBytes = u32(144)
	t.MinRTT = u32(148)
	t.DataSegsIn = u32(152)
	t.DataSegsOut = u32(156)
	t.DeliveryRate = u64(160)
	t.BusyTime = u64(168)
	t.RwndLimited = u64(176)
	t.SndbufLimited = u64(184)
	t.Delivered = u32(192)
	t.DeliveredCE = u32(196)
	t.BytesSent = u64(200)
	t.BytesRetrans = u64(208)
	t.DSACKDups = u32(216)
	t.ReordSeen = u32(220)
	t.RcvOOOPack = u32(224)
	t.SndWnd = u32(228)
	t.RcvWnd = u32(232)
	t.Rehash = u32(236)
	t.TotalRTO = ne.Uint16(p[240:])
	t.TotalRTORecoveries = ne.Uint16(p[242:])
	t.TotalRTOTime = u32(244)
	return t
}

// parseDump walks one received datagram of netlink messages, calling fn
// with each socket of the dump numbered seq. base is the stream offset of
// b[0], used in errors. done reports NLMSG_DONE.
func parseDump(b []byte, seq uint32, base int, fn func(*snapshot.Socket) error) (done bool, err error) {
	return parseDumpInto(b, seq, base, nil, fn)
}

// parseDumpInto is parseDump decoding every socket into reuse when it is
// not nil, or into a fresh one each.
func parseDumpInto(b []byte, seq uint32, base int, reuse *full, fn func(*snapshot.Socket) error) (done bool, err error) {
	var d decoded
	for off := 0; off < len(b); {
		if len(b)-off < nlmsgHdrLen {
			return false, fmt.Errorf("offset %d: %w: %d bytes", base+off, errShortHeader, len(b)-off)
		}
		mlen := int(ne.Uint32(b[off:]))
		typ := ne.Uint16(b[off+4:])
		mseq := ne.Uint32(b[off+8:])
		if mlen < nlmsgHdrLen || mlen > len(b)-off {
			return false, fmt.Errorf("offset %d: %w: nlmsg_len %d, %d bytes left", base+off, errShortMsg, mlen, len(b)-off)
		}
		body := b[off+nlmsgHdrLen : off+mlen]
		next := off + (mlen+3)&^3
		if mseq != seq {
			off = next // not ours (a stale reply); skip
			continue
		}
		switch typ {
		case nlmsgDone:
			// sock_diag puts the dump's final status in an int after the header.
			if len(body) >= 4 {
				if e := int32(ne.Uint32(body)); e < 0 {
					return true, fmt.Errorf("offset %d: dump ended with %w", base+off, syscall.Errno(-e))
				}
			}
			return true, nil
		case nlmsgError:
			if len(body) < 4 {
				return false, fmt.Errorf("offset %d: %w: netlink error of %d bytes", base+off, errShortMsg, len(body))
			}
			e := int32(ne.Uint32(body))
			if e == 0 {
				off = next // an ACK
				continue
			}
			if e > 0 {
				e = -e
			}
			return false, fmt.Errorf("offset %d: netlink: %w", base+off, syscall.Errno(-e))
		case sockDiagByFam, tcpdiagGetSock:
			d = decoded{}
			if err := decodeInto(body, &d); err != nil {
				return false, fmt.Errorf("offset %d: %w", base+off, err)
			}
			sk := reuse.set(&d)
			if sk == nil {
				sk = d.socket()
			}
			if err := fn(sk); err != nil {
				return false, err
			}
		}
		off = next
	}
	return false, nil
}

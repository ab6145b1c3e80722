// SPDX-License-Identifier: Apache-2.0

// Package bdp does the bandwidth-delay arithmetic behind buffer sizing:
// how many bytes a path holds in flight, what send and receive buffers
// that takes, and whether a host's sysctls allow it.
package bdp

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Bytes is the bandwidth-delay product: rate (bits/s) x rtt, in bytes.
// Non-positive or non-finite inputs give 0.
func Bytes(bitsPerSec float64, rtt time.Duration) float64 {
	if !(bitsPerSec > 0) || math.IsInf(bitsPerSec, 0) || rtt <= 0 {
		return 0
	}
	return bitsPerSec / 8 * rtt.Seconds()
}

// Ceiling is the throughput (bits/s) a window of buf bytes allows at rtt:
// one window per round trip. 0 when rtt is not positive.
func Ceiling(buf float64, rtt time.Duration) float64 {
	if rtt <= 0 || !(buf > 0) {
		return 0
	}
	return buf * 8 / rtt.Seconds()
}

// ParseRate parses a rate into bits per second. Lower-case "b" or "bit"
// means bits, upper-case "B" or "byte" bytes; a bare prefix is bits
// ("1G" = 1 Gbit/s). A bare number is refused: "100" could be bits, bytes
// or megabits, and taken as 100 bit/s it made a BDP of 0 bytes. Prefixes k, M, G, T are decimal; Ki, Mi, Gi, Ti
// binary. Examples: "100mbit", "1gbit", "1G", "500kbit", "100Mbps",
// "12.5MB/s". Unlike tc, "mbps" means megabits, not megabytes.
func ParseRate(s string) (float64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("bdp: empty rate (want e.g. 100mbit, 1gbit, 12.5MB/s)")
	}
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("bdp: rate %q: does not start with a number", s)
	}
	num, err := strconv.ParseFloat(in[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("bdp: rate %q: bad number %q", s, in[:i])
	}
	unit := strings.TrimSpace(in[i:])
	if unit == "" {
		return 0, fmt.Errorf("bdp: rate %q has no unit (want e.g. %smbit, %sgbit, %sMB/s)", s, in[:i], in[:i], in[:i])
	}
	mult, rest := prefix(unit)
	per, ok := unitBits(rest)
	if !ok {
		return 0, fmt.Errorf("bdp: rate %q: unknown unit %q (want bit, bps, B/s with k, M, G, T: e.g. 100mbit, 12.5MB/s)", s, unit)
	}
	v := num * mult * per
	if !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bdp: rate %q: must be positive and finite", s)
	}
	return v, nil
}

// prefix splits a unit into its SI or binary multiplier and the rest.
func prefix(u string) (float64, string) {
	if u == "" {
		return 1, ""
	}
	var m float64
	switch u[0] {
	case 'k', 'K':
		m = 1e3
	case 'm', 'M':
		m = 1e6
	case 'g', 'G':
		m = 1e9
	case 't', 'T':
		m = 1e12
	default:
		return 1, u
	}
	if len(u) > 1 && u[1] == 'i' {
		switch m {
		case 1e3:
			return 1 << 10, u[2:]
		case 1e6:
			return 1 << 20, u[2:]
		case 1e9:
			return 1 << 30, u[2:]
		}
		return 1 << 40, u[2:]
	}
	return m, u[1:]
}

// unitBits says how many bits one of the unit is; "" is bits.
func unitBits(u string) (float64, bool) {
	u = strings.TrimSuffix(u, "/s")
	switch u {
	case "", "b", "bit", "bits", "Bit", "Bits", "bps":
		return 1, true
	case "B", "Bps", "byte", "bytes", "Byte", "Bytes":
		return 8, true
	}
	return 0, false
}

// Plan says what buffers a path needs and whether a host's settings allow it.
//
// Sizes are in the kernel's own units, the values ss shows as tb (sndbuf)
// and rb (rcvbuf):
//
//   - Sender: one BDP of data is unacknowledged at any time, so the send
//     buffer must hold at least BDP, plus whatever the application queues
//     beyond it (notsent). Autotuning (tcp_sndbuf_expand) aims at about
//     twice the congestion window; an application asking SO_SNDBUF = BDP
//     gets 2 x BDP because the kernel doubles the request.
//   - Receiver: the window the receiver advertises is only part of its
//     rcvbuf, the rest being reserved for sk_buff overhead. Up to Linux 6.5
//     that part was rcvbuf - rcvbuf>>tcp_adv_win_scale, exactly half with
//     the default tcp_adv_win_scale=1; since 6.6 the kernel uses a per
//     socket ratio (payload / truesize of the skbs it has received), which
//     starts at one half and is typically a half to two thirds on Ethernet.
//     So advertising a BDP-sized window needs rcvbuf of about 2 x BDP. An
//     application asking SO_RCVBUF = BDP gets rcvbuf 2 x BDP (doubled).
type Plan struct {
	RTT  time.Duration
	Rate float64 // bits per second
	BDP  float64 // bytes
	// SndBuf and RcvBuf are the buffers each side needs, rounded up to a
	// power of two (up to 1 MiB) or a whole MiB.
	SndBuf, RcvBuf float64
	// AskSndBuf and AskRcvBuf are the values to pass to setsockopt
	// SO_SNDBUF / SO_RCVBUF, which the kernel doubles.
	AskSndBuf, AskRcvBuf float64
	Checks               []Check
}

// Check is one host setting against what the plan needs.
type Check struct {
	Setting string
	Current string // "unknown" when not collected
	Needed  int64
	OK      bool
	Command string // the command that fixes it, when not OK
	Note    string
}

// RoundUp rounds a buffer size up to a power of two up to 1 MiB and to a
// whole MiB above, the sizes people write in configs. 0 for v <= 0.
func RoundUp(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	if v > 1<<50 {
		return 1 << 50
	}
	if v <= 1<<20 {
		p := int64(1)
		for float64(p) < v {
			p <<= 1
		}
		return p
	}
	return int64(math.Ceil(v/(1<<20))) << 20
}

// For computes the plan and checks it against the sysctls in s (nil skips
// the checks).
func For(rtt time.Duration, bitsPerSec float64, s *snapshot.Snapshot) Plan {
	b := Bytes(bitsPerSec, rtt)
	p := Plan{RTT: rtt, Rate: bitsPerSec, BDP: b}
	if b == 0 {
		return p
	}
	p.SndBuf = float64(RoundUp(b))
	p.RcvBuf = float64(RoundUp(2 * b))
	p.AskSndBuf = float64(RoundUp(b))
	p.AskRcvBuf = float64(RoundUp(b))
	if s == nil {
		return p
	}
	ask := int64(p.AskSndBuf)
	p.Checks = append(p.Checks,
		maxCheck(s, "net.core.wmem_max", int64(p.AskSndBuf),
			"caps SO_SNDBUF requests; an application asking "+itoa(ask)+" gets sndbuf "+itoa(2*ask)),
		maxCheck(s, "net.core.rmem_max", int64(p.AskRcvBuf),
			"caps SO_RCVBUF requests; asking "+itoa(int64(p.AskRcvBuf))+" gives rcvbuf "+itoa(2*int64(p.AskRcvBuf))+", a window of about "+itoa(int64(p.AskRcvBuf))),
		tripleCheck(s, "net.ipv4.tcp_wmem", int64(p.SndBuf), "send autotuning grows sndbuf up to this"),
		tripleCheck(s, "net.ipv4.tcp_rmem", int64(p.RcvBuf), "receive autotuning grows rcvbuf up to this; about half of it becomes window"),
		flagCheck(s, "net.ipv4.tcp_moderate_rcvbuf", "receive autotuning; 0 leaves every socket at tcp_rmem[1]"),
	)
	if b > 65535 {
		p.Checks = append(p.Checks, flagCheck(s, "net.ipv4.tcp_window_scaling", "without window scaling no window exceeds 64K"))
	}
	p.Checks = append(p.Checks, memCheck(s, int64(p.SndBuf+p.RcvBuf)))
	return p
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func unknownCheck(name string, needed int64) Check {
	return Check{Setting: name, Current: "unknown", Needed: needed, Note: "not collected"}
}

func maxCheck(s *snapshot.Snapshot, name string, needed int64, note string) Check {
	v, ok := s.SysctlInt(name)
	if !ok {
		return unknownCheck(name, needed)
	}
	c := Check{Setting: name, Current: itoa(v), Needed: needed, OK: v >= needed, Note: note}
	if !c.OK {
		c.Command = fmt.Sprintf("sysctl -w %s=%d", name, needed)
	}
	return c
}

// tripleCheck checks the max (third value) of tcp_wmem/tcp_rmem.
func tripleCheck(s *snapshot.Snapshot, name string, needed int64, note string) Check {
	v, ok := s.SysctlInts(name)
	if !ok || len(v) != 3 {
		return unknownCheck(name+"[2]", needed)
	}
	c := Check{Setting: name + "[2]", Current: itoa(v[2]), Needed: needed, OK: v[2] >= needed, Note: note}
	if !c.OK {
		c.Command = fmt.Sprintf("sysctl -w %s='%d %d %d'", name, v[0], v[1], needed)
	}
	return c
}

func flagCheck(s *snapshot.Snapshot, name, note string) Check {
	v, ok := s.SysctlInt(name)
	if !ok {
		return unknownCheck(name, 1)
	}
	c := Check{Setting: name, Current: itoa(v), Needed: 1, OK: v >= 1, Note: note}
	if !c.OK {
		c.Command = fmt.Sprintf("sysctl -w %s=1", name)
	}
	return c
}

// memCheck compares tcp_mem's pressure threshold (pages, host-wide) with
// one connection's buffers; it is a note, since the real demand is the
// sum over all busy connections.
func memCheck(s *snapshot.Snapshot, bytes int64) Check {
	const page = 4096
	needed := (bytes + page - 1) / page
	v, ok := s.SysctlInts("net.ipv4.tcp_mem")
	if !ok || len(v) != 3 {
		return unknownCheck("net.ipv4.tcp_mem[1]", needed)
	}
	return Check{Setting: "net.ipv4.tcp_mem[1]", Current: itoa(v[1]), Needed: needed, OK: v[1] >= needed,
		Note: fmt.Sprintf("host-wide, in 4K pages: one such connection needs %d pages for both buffers; above tcp_mem[1] every socket's buffers are squeezed", needed)}
}

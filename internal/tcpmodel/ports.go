// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TimeWaitLen is TCP_TIMEWAIT_LEN: a socket stays in TIME_WAIT for 60 s,
// fixed in the kernel (tcp_fin_timeout does not change it).
const TimeWaitLen = 60 * time.Second

// DefaultReuseDelay is how long a TIME_WAIT socket must age before
// connect() may take its port over when tcp_tw_reuse allows it: the
// default of net.ipv4.tcp_tw_reuse_delay (ms, Linux 6.14+); older kernels
// wait for the timestamp clock's next second, 1-2 s.
const DefaultReuseDelay = time.Second

// Reuse is the namespace's TIME_WAIT reuse policy for connect()
// (tcp_twsk_unique): with tcp_tw_reuse 1 for every destination, with 2
// (the default) only when either address is loopback or the socket is
// bound to lo; in both cases only with TCP timestamps, and only once the
// TIME_WAIT socket is older than the reuse delay.
type Reuse struct {
	Mode int // tcp_tw_reuse: 0, 1 or 2; -1 when not collected
	// Delay is tcp_tw_reuse_delay, or DefaultReuseDelay when the kernel
	// lacks it (DelayKnown false).
	Delay      time.Duration
	DelayKnown bool
	// Timestamps is net.ipv4.tcp_timestamps != 0 (assumed on when not
	// collected: the kernel default).
	Timestamps bool
}

// ReuseOf reads the policy from a snapshot's sysctls.
func ReuseOf(s *snapshot.Snapshot) Reuse {
	r := Reuse{Mode: -1, Delay: DefaultReuseDelay, Timestamps: true}
	if v, ok := s.SysctlInt("net.ipv4.tcp_tw_reuse"); ok {
		r.Mode = int(v)
	}
	if v, ok := s.SysctlInt("net.ipv4.tcp_tw_reuse_delay"); ok && v >= 0 {
		r.Delay, r.DelayKnown = time.Duration(v)*time.Millisecond, true
	}
	if v, ok := s.SysctlInt("net.ipv4.tcp_timestamps"); ok {
		r.Timestamps = v != 0
	}
	return r
}

// Applies reports whether connect() from local to remote may reuse a
// TIME_WAIT port (timestamps permitting). ifindex is the socket's bound
// device (1 is lo).
func (r Reuse) Applies(local, remote netip.Addr, ifindex uint32) bool {
	if !r.Timestamps {
		return false
	}
	switch r.Mode {
	case 1:
		return true
	case 2:
		return ifindex == 1 || IsLoopback(local) || IsLoopback(remote)
	}
	return false
}

// Describe says what the policy means for one destination.
func (r Reuse) Describe(applies bool) string {
	switch {
	case r.Mode < 0:
		return "unknown: net.ipv4.tcp_tw_reuse not collected"
	case !r.Timestamps:
		return fmt.Sprintf("tcp_tw_reuse=%d, but tcp_timestamps=0: no TIME_WAIT port is reused", r.Mode)
	case applies:
		d := fmt.Sprintf("%s (tcp_tw_reuse_delay)", r.Delay)
		if !r.DelayKnown {
			d = "about 1-2 s (this kernel has no tcp_tw_reuse_delay)"
		}
		return fmt.Sprintf("tcp_tw_reuse=%d applies here: connect() takes over a TIME_WAIT port once it is older than %s, when the peer sent timestamps", r.Mode, d)
	case r.Mode == 2:
		return "tcp_tw_reuse=2 reuses TIME_WAIT ports only towards loopback: not here, each TIME_WAIT holds its port for 60 s"
	}
	return fmt.Sprintf("tcp_tw_reuse=%d: each TIME_WAIT holds its port for 60 s", r.Mode)
}

// IsLoopback is the kernel's ipv4_is_loopback / ipv6_addr_loopback,
// including v4-mapped 127/8.
func IsLoopback(a netip.Addr) bool { return a.Unmap().IsLoopback() }

// TimeWaitAge is how long a TIME_WAIT socket has been in TIME_WAIT, from
// its timer (sock_diag idiag_expires counts down from 60 s).
func TimeWaitAge(sk *snapshot.Socket) time.Duration {
	left := time.Duration(sk.Expires) * time.Millisecond
	if left > TimeWaitLen {
		return 0
	}
	return TimeWaitLen - left
}

// PortSpace is a namespace's ephemeral range as connect() sees it: the
// range, minus reserved ports, minus ports bound by listeners or by
// sockets bound but not connected (the kernel skips bind()-owned ports
// for every destination).
type PortSpace struct {
	Lo, Hi    int
	Reserved  [][2]int
	NReserved int // reserved ports inside [Lo, Hi]
	// Listen holds listeners' ports; Bound the ports in the range held by
	// listeners or bound, unconnected sockets.
	Listen map[uint16]bool
	Bound  map[uint16]bool
	Reuse  Reuse
	// listening is Listen as bits, which Outgoing reads for each of a
	// million sockets: made with it by NewPortSpace.
	listening [1 << 16 / 64]uint64
}

// NewPortSpace reads ip_local_port_range, ip_local_reserved_ports, the
// reuse policy and the snapshot's bound ports. A missing or bad range is
// an error; a missing reserved list counts as none.
func NewPortSpace(s *snapshot.Snapshot) (*PortSpace, error) {
	raw, ok := s.Sysctls["net.ipv4.ip_local_port_range"]
	if !ok {
		return nil, fmt.Errorf("sysctl net.ipv4.ip_local_port_range not collected")
	}
	lo, hi, err := procnet.PortRange(raw)
	if err != nil {
		return nil, err
	}
	p := &PortSpace{Lo: lo, Hi: hi, Listen: map[uint16]bool{}, Bound: map[uint16]bool{}, Reuse: ReuseOf(s)}
	if r, err := procnet.ReservedPorts(s.Sysctls["net.ipv4.ip_local_reserved_ports"]); err == nil {
		p.Reserved = r
		p.NReserved = procnet.CountReservedIn(r, lo, hi)
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		port := sk.Local.Port()
		switch sk.State {
		case snapshot.Listen:
			p.Listen[port] = true
			p.listening[port/64] |= 1 << (port % 64)
		case snapshot.Close, snapshot.BoundInactive:
		default:
			continue
		}
		if p.in(int(port)) && !p.IsReserved(int(port)) {
			p.Bound[port] = true
		}
	}
	return p, nil
}

func (p *PortSpace) in(port int) bool { return port >= p.Lo && port <= p.Hi }

// Size is the number of ports in the range.
func (p *PortSpace) Size() int { return p.Hi - p.Lo + 1 }

// Usable is what connect() can pick from for one (source, destination,
// port): the range minus reserved and bound ports.
func (p *PortSpace) Usable() int { return p.Size() - p.NReserved - len(p.Bound) }

// IsReserved reports whether port is in ip_local_reserved_ports.
func (p *PortSpace) IsReserved(port int) bool {
	for _, r := range p.Reserved {
		if port >= r[0] && port <= r[1] {
			return true
		}
	}
	return false
}

// Outgoing reports whether sk holds an ephemeral port picked for an
// outgoing connection: local port in the range, not reserved, not a
// listener's port, with a remote end.
func (p *PortSpace) Outgoing(sk *snapshot.Socket) bool {
	port := int(sk.Local.Port())
	if sk.State == snapshot.Listen || sk.Remote.Port() == 0 || !p.in(port) || p.listening[port/64]&(1<<(port%64)) != 0 {
		return false
	}
	return !p.IsReserved(port)
}

// Dest is one 4-tuple space: connect() may reuse a local port for another
// destination, so the range limits each (source, destination, port) alone.
type Dest struct {
	Src netip.Addr
	Dst netip.AddrPort
}

// DestOf is the space of connections from src to dst, in IPv4 form where
// either is IPv4-mapped: an IPv6 socket connected to an IPv4-mapped
// address takes its port from the IPv4 space (tcp_v6_connect hands it to
// tcp_v4_connect).
func DestOf(src netip.Addr, dst netip.AddrPort) Dest {
	return Dest{Src: src.Unmap(), Dst: Unmapped(dst)}
}

// DestUse is one destination's ephemeral ports at one sample.
type DestUse struct {
	Open int // sockets not in TIME_WAIT
	TW   int // in TIME_WAIT
	// TWReusable counts TIME_WAIT sockets connect() may take over now.
	TWReusable int
	// ClosedIn counts connections closed first by this side during the
	// window (ClosedInWindow). 0 without a window.
	ClosedIn int
	// ClosedRecent counts, where reuse applies, TIME_WAIT sockets younger
	// than RecentHorizon: connect() cannot have taken those over, so they
	// give the close rate where older ones may be gone.
	ClosedRecent int
	// NewOpen counts sockets absent from the previous sample (by cookie).
	NewOpen int
	// Reuse says whether TIME_WAIT reuse applies to this destination;
	// NoTimestamps that an established socket to it lacks timestamps,
	// which rules reuse out.
	Reuse, NoTimestamps bool
	Owners              Tally
	// Connects is what the eBPF source counted towards Dst (any source
	// address) over its interval; nil when the snapshot has no events.
	Connects *Connects
}

// Held is what the destination takes from the usable range now.
func (u *DestUse) Held() int { return u.Open + u.TW - u.TWReusable }

// PrevState looks one of the current sample's sockets up in the previous
// sample (by cookie).
type PrevState func(sk *snapshot.Socket) (snapshot.State, bool)

// ClosedInWindow reports whether a TIME_WAIT socket entered TIME_WAIT
// during the window: its timer says it is younger than the window, or the
// previous sample (when given) did not have it in TIME_WAIT.
func ClosedInWindow(sk *snapshot.Socket, prev PrevState, window time.Duration) bool {
	if window <= 0 {
		return false
	}
	if TimeWaitAge(sk) < min(window, TimeWaitLen) {
		return true
	}
	if prev == nil {
		return false
	}
	st, ok := prev(sk)
	return !ok || st != snapshot.TimeWait
}

// DestUsage groups the outgoing sockets of cur by destination. prev (nil
// without a previous sample) marks sockets new in the window; window (0
// without one) bounds what counts as closed during it.
func (p *PortSpace) DestUsage(cur *snapshot.Snapshot, prev PrevState, window time.Duration) map[Dest]*DestUse {
	m := map[Dest]*DestUse{}
	var last *DestUse
	var lastK Dest
	recent := RecentHorizon(window, p.Reuse.Delay)
	var tb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if !p.Outgoing(sk) {
			continue
		}
		// Sockets to one destination mostly come together in a dump:
		// the last one's entry is tried before the map.
		k := DestOf(sk.Local.Addr(), sk.Remote.AddrPort())
		u := last
		if u == nil || k != lastK {
			if u = m[k]; u == nil {
				u = &DestUse{Reuse: p.Reuse.Applies(sk.Local.Addr(), sk.Remote.Addr(), sk.IfIndex)}
				m[k] = u
			}
			last, lastK = u, k
		}
		if prev != nil {
			if _, ok := prev(sk); !ok {
				u.NewOpen++
			}
		}
		if sk.State != snapshot.TimeWait {
			u.Open++
			if pid, _ := cur.Owner(sk); pid != 0 {
				u.Owners.Add(pid)
			}
			if sk.State == snapshot.Established {
				if ti := sk.TCP(&tb); ti != nil && ti.Options&OptTimestamps == 0 {
					u.NoTimestamps = true // Reuse ruled out below, once counted
				}
			}
			continue
		}
		u.TW++
		if ClosedInWindow(sk, prev, window) {
			u.ClosedIn++
		}
		if age := TimeWaitAge(sk); u.Reuse && age >= p.Reuse.Delay {
			u.TWReusable++
		} else if u.Reuse && age < recent {
			u.ClosedRecent++
		}
	}
	for _, fo := range cur.FlowOwners {
		if u := m[DestOf(fo.Local, fo.Remote)]; u != nil && u.Owners.Len() == 0 {
			u.Owners.Add(fo.Pid)
		}
	}
	for _, u := range m {
		if u.NoTimestamps {
			u.Reuse, u.TWReusable, u.ClosedRecent = false, 0, 0
		}
	}
	if byDst, ok := ConnectsOf(cur); ok {
		for k, u := range m {
			u.Connects = byDst.To(k.Dst)
		}
	}
	return m
}

// Connects is what the eBPF source counted of the connect() calls towards
// one destination over Interval, by process.
type Connects struct {
	Interval time.Duration
	// Opens counts connect() calls, Failed those that found no free
	// ephemeral port (EADDRNOTAVAIL), Unanswered those refused, timed
	// out, unreachable or abandoned: none of them became a connection.
	Opens, Failed, Unanswered uint64
	// Procs is who called connect(), most failures then most opens first.
	Procs []ConnectProc
}

// ConnectProc is one process's share of Connects.
type ConnectProc struct {
	Pid           int
	Command       string
	Opens, Failed uint64
}

// Opened is the connect() calls that became connections.
func (c *Connects) Opened() uint64 { return c.Opens - min(c.Failed+c.Unanswered, c.Opens) }

// Top is the process that failed most, else opened most; nil when none.
func (c *Connects) Top() *ConnectProc {
	if len(c.Procs) == 0 {
		return nil
	}
	return &c.Procs[0]
}

// ConnectsByDest indexes a snapshot's eBPF connects by destination.
type ConnectsByDest struct {
	interval time.Duration
	m        map[netip.AddrPort]*Connects
}

// ConnectsOf indexes s's eBPF events by destination; ok is false when s
// has none (the source was off or failed: nothing is known).
func ConnectsOf(s *snapshot.Snapshot) (ConnectsByDest, bool) {
	ev := s.Events
	if ev == nil || !ev.Has(snapshot.ProgLifecycle) {
		return ConnectsByDest{}, false
	}
	b := ConnectsByDest{interval: ev.Interval(), m: map[netip.AddrPort]*Connects{}}
	for _, f := range ev.Flows {
		if f.Accepted() || f.Opens == 0 && f.FailedPorts == 0 {
			continue
		}
		dst := Unmapped(f.Remote)
		c := b.m[dst]
		if c == nil {
			c = &Connects{Interval: b.interval}
			b.m[dst] = c
		}
		c.Opens += f.Opens
		c.Failed += f.FailedPorts
		c.Unanswered += f.Unanswered()
		c.Procs = append(c.Procs, ConnectProc{Pid: f.Pid, Command: f.Command, Opens: f.Opens, Failed: f.FailedPorts})
	}
	for _, c := range b.m {
		slices.SortStableFunc(c.Procs, func(a, b ConnectProc) int {
			return cmp.Or(cmp.Compare(b.Failed, a.Failed), cmp.Compare(b.Opens, a.Opens), cmp.Compare(a.Pid, b.Pid))
		})
	}
	return b, true
}

// To is the connects towards dst (IPv4-mapped or not): zero counts when
// none were seen.
func (b ConnectsByDest) To(dst netip.AddrPort) *Connects {
	if c := b.m[Unmapped(dst)]; c != nil {
		return c
	}
	return &Connects{Interval: b.interval}
}

// EventsMissing says why a snapshot has no eBPF connection events, ""
// when it has.
func EventsMissing(s *snapshot.Snapshot) string { return ProgramMissing(s, snapshot.ProgLifecycle) }

// ProgramMissing says why a snapshot has no counts from the eBPF program
// on tracepoint prog (snapshot.Prog*), "" when it has.
func ProgramMissing(s *snapshot.Snapshot, prog string) string {
	if s.Events != nil {
		for _, m := range s.Events.Missing {
			if m.Program == prog {
				return "the eBPF program on " + prog + " did not run: " + m.Reason
			}
		}
		return ""
	}
	if msg, failed := s.Failed(snapshot.SourceBPF); failed {
		return msg
	}
	return "the eBPF source was not running (--bpf off, not loadable here, or a recording made without it)"
}

// OptTimestamps is TCPI_OPT_TIMESTAMPS in tcp_info.options.
const OptTimestamps = 1

// Forecast is where one destination's port use is heading.
type Forecast struct {
	Frac float64 // held / usable now
	Full bool    // held >= usable: connect() to it fails now
	// Rates per second over the window; valid only if HasRate.
	HasRate   bool
	CloseRate float64 // closed first by this side (entered TIME_WAIT)
	// Recent, when not 0, is the horizon CloseRate was counted over
	// instead of the window (DestUse.ClosedRecent).
	Recent   time.Duration
	OpenRate float64 // new sockets seen (connections opened and closed in the window are missed)
	Growth   float64 // held ports per second
	// Hold is how long a closed connection keeps its port: the reuse
	// delay where reuse applies, else 60 s.
	Hold time.Duration
	// Plateau is the held level the close rate settles at: open sockets
	// plus close rate x Hold.
	Plateau  float64
	Exhausts bool          // Plateau does not fit and use is growing
	ETA      time.Duration // until the range runs out, when Exhausts
}

// Forecast projects u (with prevHeld from the previous sample, -1 when
// none) against usable ports over window.
func (u *DestUse) Forecast(usable, prevHeld int, window time.Duration, reuseDelay time.Duration) Forecast {
	f := Forecast{Hold: TimeWaitLen}
	if u.Reuse {
		f.Hold = reuseDelay
	}
	held := u.Held()
	if usable <= 0 {
		return Forecast{Full: true, Frac: 1, Hold: f.Hold}
	}
	f.Frac = float64(held) / float64(usable)
	f.Full = held >= usable
	if window <= 0 || prevHeld < 0 {
		return f
	}
	sec := window.Seconds()
	f.HasRate = true
	f.CloseRate = float64(u.ClosedIn) / min(sec, TimeWaitLen.Seconds())
	// Where reuse applies, connect() takes over TIME_WAIT older than the
	// reuse delay, so the window's count falls short: the young ones say
	// the rate.
	if h := RecentHorizon(window, reuseDelay); u.Reuse && h > 0 {
		if r := float64(u.ClosedRecent) / h.Seconds(); r > f.CloseRate {
			f.CloseRate, f.Recent = r, h
		}
	}
	f.OpenRate = float64(u.NewOpen) / sec
	f.Growth = float64(held-prevHeld) / sec
	f.Plateau = float64(u.Open) + f.CloseRate*f.Hold.Seconds()
	if !f.Full && f.Growth > 0 && f.Plateau >= float64(usable) {
		f.Exhausts = true
		f.ETA = time.Duration(float64(usable-held) / f.Growth * float64(time.Second))
	}
	return f
}

// RecentHorizon is the age under which a TIME_WAIT socket is counted
// as a recent close where reuse applies: younger than the window and the
// reuse delay, so neither missed nor possibly taken over.
func RecentHorizon(window, reuseDelay time.Duration) time.Duration {
	return min(window, reuseDelay, TimeWaitLen)
}

// Peak is the number of ports a destination needs: what it holds now or
// the level its churn settles at, whichever is larger.
func (f Forecast) Peak(held int) int {
	if f.HasRate && int(f.Plateau+0.5) > held {
		return int(f.Plateau + 0.5)
	}
	return held
}

// PlateauWithoutReuse is the level the close rate would settle at if
// every TIME_WAIT held its port 60 s: what turning reuse off would cost.
func (f Forecast) PlateauWithoutReuse(open int) float64 {
	return float64(open) + f.CloseRate*TimeWaitLen.Seconds()
}

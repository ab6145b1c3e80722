package rules

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Shared derivations used by more than one rule. Keep each small and pure.

// subject builds a finding subject for a socket, naming its first owner.
func subject(s *snapshot.Snapshot, sk *snapshot.Socket) diag.Subject {
	sub := diag.Subject{Netns: s.Netns.Name, Local: sk.Local.String()}
	if sk.State != snapshot.Listen {
		sub.Remote = sk.Remote.String()
	}
	if len(sk.Pids) > 0 {
		sub.Pid = sk.Pids[0]
		if p := s.Procs[sk.Pids[0]]; p != nil {
			sub.Command = p.Command
		}
	}
	return sub
}

// owners describes a socket's owners as "nginx(pid 12), nginx(pid 13)",
// or "unknown owner" when the owner scan did not find it.
func owners(s *snapshot.Snapshot, pids []int) string {
	if len(pids) == 0 {
		return "unknown owner"
	}
	parts := make([]string, 0, len(pids))
	for _, pid := range pids {
		cmd := "?"
		if p := s.Procs[pid]; p != nil {
			cmd = p.Command
		}
		parts = append(parts, fmt.Sprintf("%s(pid %d)", cmd, pid))
	}
	return strings.Join(parts, ", ")
}

// fmtBytes prints a byte count the way people size buffers: 16K, 4M, 3.4M.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return trimFloat(b/(1<<30)) + "G"
	case b >= 1<<20:
		return trimFloat(b/(1<<20)) + "M"
	case b >= 1<<10:
		return trimFloat(b/(1<<10)) + "K"
	}
	return fmt.Sprintf("%.0fB", b)
}

// fmtRate prints bytes per second as bits per second: 93.2 Mbit/s.
func fmtRate(bytesPerSec float64) string {
	bits := bytesPerSec * 8
	switch {
	case bits >= 1e9:
		return trimFloat(bits/1e9) + " Gbit/s"
	case bits >= 1e6:
		return trimFloat(bits/1e6) + " Mbit/s"
	case bits >= 1e3:
		return trimFloat(bits/1e3) + " kbit/s"
	}
	return fmt.Sprintf("%.0f bit/s", bits)
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

// pct prints a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// Ephemeral ports, shared by port-exhaustion and time-wait-churn.

// timeWaitLen is TCP_TIMEWAIT_LEN: a socket stays in TIME_WAIT for 60 s,
// fixed in the kernel (tcp_fin_timeout does not change it).
const timeWaitLen = 60 * time.Second

// ephemeral is the netns's ephemeral port range and the ports it cannot
// hand out for connect(): reserved ones and listeners' ports.
type ephemeral struct {
	lo, hi   int
	reserved [][2]int
	// nReserved counts reserved ports inside [lo,hi].
	nReserved int
	listen    map[uint16]bool
}

// size is the number of ports in the range.
func (e *ephemeral) size() int { return e.hi - e.lo + 1 }

// usable is the range minus reserved ports: what connect() can pick from
// for one (source, destination, destination port).
func (e *ephemeral) usable() int { return e.size() - e.nReserved }

// ephemeralPorts reads ip_local_port_range, ip_local_reserved_ports and
// the listeners of s. A missing or bad range is an error (unknown); a
// missing reserved list counts as none.
func ephemeralPorts(s *snapshot.Snapshot) (*ephemeral, error) {
	raw, ok := s.Sysctls["net.ipv4.ip_local_port_range"]
	if !ok {
		return nil, diag.Unknownf("sysctl net.ipv4.ip_local_port_range not collected")
	}
	lo, hi, err := procnet.PortRange(raw)
	if err != nil {
		return nil, diag.Unknownf("%v", err)
	}
	e := &ephemeral{lo: lo, hi: hi, listen: map[uint16]bool{}}
	if r, err := procnet.ReservedPorts(s.Sysctls["net.ipv4.ip_local_reserved_ports"]); err == nil {
		e.reserved = r
		e.nReserved = procnet.CountReservedIn(r, lo, hi)
	}
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Listen {
			e.listen[s.Sockets[i].Local.Port()] = true
		}
	}
	return e, nil
}

// outgoing reports whether sk holds an ephemeral port picked for an
// outgoing connection: local port in the range, not reserved, not a
// listener's port, with a remote end.
func (e *ephemeral) outgoing(sk *snapshot.Socket) bool {
	p := int(sk.Local.Port())
	if sk.State == snapshot.Listen || sk.Remote.Port() == 0 || p < e.lo || p > e.hi || e.listen[uint16(p)] {
		return false
	}
	for _, r := range e.reserved {
		if p >= r[0] && p <= r[1] {
			return false
		}
	}
	return true
}

// destKey is one 4-tuple space: connect() may reuse an ephemeral port for
// another destination, so the range limits each (src, dst, dport) alone.
type destKey struct {
	src netip.Addr
	dst netip.AddrPort
}

// portUse counts one destination's use of ephemeral ports over a window.
type portUse struct {
	used, tw int // sockets now, and how many of them in TIME_WAIT
	prevUsed int // sockets in the previous sample
	newConns int // sockets now that were not in the previous sample
	newTW    int // sockets that entered TIME_WAIT during the window
}

// add counts one current socket; prev is the same socket in the
// previous sample or nil.
func (u *portUse) add(sk, prev *snapshot.Socket) {
	u.used++
	if sk.State == snapshot.TimeWait {
		u.tw++
		if prev == nil || prev.State != snapshot.TimeWait {
			u.newTW++
		}
	}
	if prev == nil {
		u.newConns++
	}
}

// portForecast is where a destination's port use is heading.
type portForecast struct {
	frac float64 // used / usable now
	// Rates per second over the window; valid only if hasRate.
	hasRate          bool
	connRate, growth float64
	closeRate        float64 // connections entering TIME_WAIT per second
	plateau          float64 // ports in use once TIME_WAIT churn levels off
	eta              time.Duration
	exhausts         bool // forecast to run out
	full             bool // already out: used >= usable
}

// forecastPorts does the arithmetic: usage now, connection and growth
// rates, the level TIME_WAIT churn settles at (sockets not in TIME_WAIT
// plus close rate x 60 s) and, when that level does not fit in the range
// and use is growing, the time until the range runs out.
func forecastPorts(u portUse, usable int, window time.Duration) portForecast {
	var f portForecast
	if usable <= 0 {
		f.full = true
		f.frac = 1
		return f
	}
	f.frac = float64(u.used) / float64(usable)
	f.full = u.used >= usable
	if window <= 0 {
		return f
	}
	sec := window.Seconds()
	f.hasRate = true
	f.connRate = float64(u.newConns) / sec
	f.growth = float64(u.used-u.prevUsed) / sec
	f.closeRate = float64(u.newTW) / sec
	f.plateau = float64(u.used-u.tw) + f.closeRate*timeWaitLen.Seconds()
	if !f.full && f.growth > 0 && f.plateau >= float64(usable) {
		f.exhausts = true
		f.eta = time.Duration(float64(usable-u.used) / f.growth * float64(time.Second))
	}
	return f
}

// ceilDiv returns ceil(a/b) for positive b, 0 otherwise.
func ceilDiv(a, b int) int {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// nextPow2 returns the smallest power of two >= n (1 for n <= 1).
func nextPow2(n int64) int64 {
	p := int64(1)
	for p < n && p < 1<<62 {
		p <<= 1
	}
	return p
}

// fmtDur prints a duration rounded for people: 45s, 12m30s, 3h5m.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// Accept backlog, shared by listen-overflow and syn-queue-overflow.

// minBacklog is the smallest accept backlog recommended: the kernel's
// default somaxconn since Linux 5.4.
const minBacklog = 4096

// backlogTarget is the backlog to recommend: the next power of two at or
// above twice what was observed (queue peak or current backlog), and at
// least minBacklog.
func backlogTarget(peak, backlog int64) int64 {
	return nextPow2(max(minBacklog, 2*peak, 2*backlog))
}

// backlogBinding says which limit set a listener's effective backlog
// (Send-Q): listen() takes min(asked, somaxconn).
func backlogBinding(backlog, somax int64, hasSomax bool) (short, long string) {
	switch {
	case !hasSomax:
		return "from an unknown limit", "unknown: net.core.somaxconn not collected"
	case backlog == somax:
		return fmt.Sprintf("capped by net.core.somaxconn %d", somax), fmt.Sprintf("somaxconn %d capped it: the application asked for %d or more", somax, somax)
	case backlog < somax:
		return fmt.Sprintf("the application's own (somaxconn %d)", somax), fmt.Sprintf("the application asked for %d in listen(); somaxconn %d would allow more", backlog, somax)
	}
	return "above today's somaxconn", fmt.Sprintf("somaxconn (%d) was lowered after this listen(); the listener keeps %d until it listens again", somax, backlog)
}

func somaxEvidence(somax int64, ok bool) diag.Evidence {
	ev := diag.Evidence{Name: "somaxconn", Source: "sysctl net.core.somaxconn"}
	if ok {
		ev.Value = fmt.Sprint(somax)
	} else {
		ev.Value = "unknown (not collected)"
	}
	return ev
}

func abortOnOverflowEvidence(s *snapshot.Snapshot) diag.Evidence {
	ev := diag.Evidence{Name: "tcp_abort_on_overflow", Source: "sysctl net.ipv4.tcp_abort_on_overflow"}
	switch v, ok := s.SysctlInt("net.ipv4.tcp_abort_on_overflow"); {
	case !ok:
		ev.Value = "unknown (not collected)"
	case v == 0:
		ev.Value = "0: overflowing handshakes are dropped silently; clients retransmit and wait (1 s, 2 s, ...) instead of failing; keep 0 unless failing fast is wanted"
	default:
		ev.Value = fmt.Sprintf("%d: overflowing handshakes are answered with RST; clients see \"connection reset\" at once", v)
	}
	return ev
}

// somaxconnFix raises net.core.somaxconn to n and persists it.
func somaxconnFix(n int64) diag.Fix {
	return diag.Fix{
		Scope: "kernel", Target: "sysctl",
		Text:    fmt.Sprintf("raise the cap on every listener's backlog to %d, and persist it", n),
		Command: fmt.Sprintf("sysctl -w net.core.somaxconn=%d && echo 'net.core.somaxconn = %d' > /etc/sysctl.d/60-somaxconn.conf", n, n),
		Risk:    "applies at the next listen(): restart the service; set per network namespace (containers have their own); a longer queue makes clients wait in it when the application is too slow, it does not make it faster",
	}
}

// backlogFixes gives the kernel and application settings that raise a
// listener's backlog to n, chosen by the owner's command.
func backlogFixes(s *snapshot.Snapshot, sk *snapshot.Socket, n, somax int64, hasSomax bool) []diag.Fix {
	var fixes []diag.Fix
	if !hasSomax || somax < n {
		fixes = append(fixes, somaxconnFix(n))
	}
	port := sk.Local.Port()
	cmd := ""
	if len(sk.Pids) > 0 {
		if p := s.Procs[sk.Pids[0]]; p != nil {
			cmd = p.Command
		}
	}
	app := func(target, text, command string) {
		fixes = append(fixes, diag.Fix{Scope: "application", Target: target, Text: text, Command: command,
			Risk: "more memory per queued connection only while queued; restart needed"})
	}
	switch {
	case strings.HasPrefix(cmd, "java"):
		app("netty", "Netty: ask for the backlog on the server bootstrap", fmt.Sprintf("serverBootstrap.option(ChannelOption.SO_BACKLOG, %d)", n))
		app("tomcat", "Tomcat / Spring Boot: the accept queue is acceptCount", fmt.Sprintf(`<Connector port="%d" acceptCount="%d"/>  (Spring Boot: server.tomcat.accept-count=%d)`, port, n, n))
		app("java", "plain Java: pass the backlog to the server socket", fmt.Sprintf("new ServerSocket(%d, %d)", port, n))
	case strings.HasPrefix(cmd, "nginx"):
		app("nginx", "nginx asks for 511 by default", fmt.Sprintf("listen %d backlog=%d;", port, n))
	case strings.HasPrefix(cmd, "node"):
		app("node", "Node asks for 511 by default", fmt.Sprintf("server.listen(%d, host, %d)", port, n))
	case strings.HasPrefix(cmd, "redis"):
		app("redis", "Redis asks for tcp-backlog (511 by default)", fmt.Sprintf("tcp-backlog %d", n))
	default:
		app("listen(2)", fmt.Sprintf("pass %d as the listen() backlog: Netty option(ChannelOption.SO_BACKLOG, %d), nginx listen %d backlog=%d;, Java new ServerSocket(%d, %d), Tomcat acceptCount=%d, Node server.listen(%d, host, %d); Go's net.Listen already asks for somaxconn (read once per process)",
			n, n, port, n, port, n, n, port, n), fmt.Sprintf("listen(fd, %d)", n))
	}
	fixes = append(fixes, diag.Fix{Scope: "application", Target: "acceptor",
		Text: "accept faster: the queue fills when the process accepts slower than clients connect; keep the accept loop free of blocking work, add acceptor threads or worker processes (Netty: do not block the boss/event loop; nginx: worker_processes auto, listen ... reuseport)",
		Risk: "none for correctness; more workers use more memory"})
	return fixes
}

// Buffers and windows, shared by sndbuf-limited, rwnd-limited,
// slow-reader, connection-bottleneck and buffer-limits.

// rttOf is the smoothed RTT of a connection; 0 when unknown.
func rttOf(ti *snapshot.TCPInfo) time.Duration {
	if ti == nil {
		return 0
	}
	return time.Duration(ti.RTT) * time.Microsecond
}

// bufPin is the verdict on whether a socket buffer was set by the
// application (SO_SNDBUF/SO_RCVBUF, which stop autotuning) and why.
type bufPin struct {
	Pinned bool   // proven or hinted
	Proof  bool   // read from the owner with SO_BUF_LOCK
	Capped bool   // the size is 2 x the net.core.*mem_max cap
	Why    string // the evidence used, for people
}

// bufLimits are a netns's limits for one direction, from sysctls (0 when
// not collected): core is net.core.wmem_max/rmem_max, initial and auto
// are tcp_wmem/tcp_rmem [1] and [2].
type bufLimits struct{ core, initial, auto int64 }

func sndLimits(s *snapshot.Snapshot) bufLimits {
	return limitsOf(s, "net.core.wmem_max", "net.ipv4.tcp_wmem")
}
func rcvLimits(s *snapshot.Snapshot) bufLimits {
	return limitsOf(s, "net.core.rmem_max", "net.ipv4.tcp_rmem")
}

func limitsOf(s *snapshot.Snapshot, core, tcp string) bufLimits {
	var l bufLimits
	l.core, _ = s.SysctlInt(core)
	if v, ok := s.SysctlInts(tcp); ok && len(v) == 3 {
		l.initial, l.auto = v[1], v[2]
	}
	return l
}

// judgeBuf decides whether a buffer of size bytes (the kernel's doubled
// value) was pinned. lock is SO_BUF_LOCK when probed and bit the bit for
// this direction (1 send, 2 receive); prev is the size in the previous
// sample (0 when none). Without the lock bit the verdict is a hint: a
// size of exactly 2 x the cap, 2 x a power of two (the kernel doubles
// requests; autotuned sizes are not round), or unchanged while below the
// autotuning maximum.
func judgeBuf(size, prev uint32, lock *uint8, bit uint8, lim bufLimits) bufPin {
	sz := int64(size)
	capped := lim.core > 0 && sz == 2*lim.core
	if lock != nil {
		p := bufPin{Proof: true, Pinned: *lock&bit != 0}
		p.Capped = p.Pinned && capped
		if p.Pinned {
			p.Why = "SO_BUF_LOCK read from the owner via pidfd_getfd: set by the application"
		} else {
			p.Why = "SO_BUF_LOCK read from the owner via pidfd_getfd: not set (autotuned)"
		}
		return p
	}
	var why []string
	if capped {
		why = append(why, fmt.Sprintf("equals 2 x the %s cap", fmtBytes(float64(lim.core))))
	}
	half := sz / 2
	if !capped && sz%2 == 0 && half >= 2048 && half&(half-1) == 0 && sz != lim.initial && sz != lim.auto {
		why = append(why, fmt.Sprintf("equals 2 x %s (the kernel doubles SO_SNDBUF/SO_RCVBUF requests)", fmtBytes(float64(half))))
	}
	if len(why) > 0 && prev != 0 && prev == size {
		why = append(why, "unchanged across samples")
	}
	if len(why) == 0 {
		return bufPin{}
	}
	return bufPin{Pinned: true, Capped: capped, Why: strings.Join(why, ", ") + " (a hint, not proof: SO_BUF_LOCK not read)"}
}

// tuple is a connection's (local, remote) pair.
type tuple struct{ local, remote netip.AddrPort }

// byTuple indexes the connected sockets of s by (local, remote), so that a
// local peer is found by looking up the reverse tuple.
func byTuple(s *snapshot.Snapshot) map[tuple]*snapshot.Socket {
	m := make(map[tuple]*snapshot.Socket)
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen || sk.State == snapshot.TimeWait {
			continue
		}
		m[tuple{sk.Local, sk.Remote}] = sk
	}
	return m
}

// localPeer returns the other end of sk when it lives in the same netns.
func localPeer(idx map[tuple]*snapshot.Socket, sk *snapshot.Socket) *snapshot.Socket {
	return idx[tuple{sk.Remote, sk.Local}]
}

// peerRates is the best delivery rate (bytes/s) seen towards each remote
// address: what the path has been shown to carry.
func peerRates(s *snapshot.Snapshot) map[netip.Addr]float64 {
	m := make(map[netip.Addr]float64)
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Established || !sk.Info.Has(snapshot.EndDeliveryRate) {
			continue
		}
		a := sk.Remote.Addr().Unmap()
		if r := float64(sk.Info.DeliveryRate); r > m[a] {
			m[a] = r
		}
	}
	return m
}

// pathRate is the rate (bytes/s) to judge a connection's path by and where
// it came from: --bandwidth when given, else the best delivery rate to the
// same peer when clearly above own (another connection shows the path can
// do more); 0 when unknown.
func pathRate(in *diag.Input, rates map[netip.Addr]float64, sk *snapshot.Socket, own float64) (float64, string) {
	if in.Options.Bandwidth > 0 {
		return in.Options.Bandwidth / 8, "--bandwidth"
	}
	if r := rates[sk.Remote.Addr().Unmap()]; r > 1.5*own && r > 0 {
		return r, "best tcp_info.delivery_rate to " + sk.Remote.Addr().String()
	}
	return 0, ""
}

// sockdiagReady returns an unknown error when sock_diag failed or gave no
// tcp_info for any established socket (so a rule cannot judge them).
func sockdiagReady(s *snapshot.Snapshot) error {
	if e, bad := s.Failed(snapshot.SourceSockdiag); bad {
		return diag.Unknownf("sock_diag failed: %s", e)
	}
	est, info := 0, 0
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Established {
			est++
			if s.Sockets[i].Info != nil {
				info++
			}
		}
	}
	if est > 0 && info == 0 {
		return diag.Unknownf("no tcp_info for any of %d established sockets", est)
	}
	return nil
}

// capFindings keeps the first n findings (already ordered worst first) and
// replaces the rest with one summary finding built by more(count).
func capFindings(fs []diag.Finding, n int, more func(int) diag.Finding) []diag.Finding {
	if len(fs) <= n {
		return fs
	}
	rest := len(fs) - n
	return append(fs[:n:n], more(rest))
}

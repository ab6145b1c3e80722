package rules

import (
	"fmt"
	"net/netip"
	"sort"
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

// flightBytes is what is in flight (unacked segments) and cwnd, in bytes
// of snd_mss; the caller checks snd_mss is set.
func flightBytes(ti *snapshot.TCPInfo) (inflight, cwnd float64) {
	mss := float64(ti.SndMSS)
	return float64(ti.Unacked) * mss, float64(ti.SndCwnd) * mss
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

// sockdiagGone returns an unknown error when sock_diag failed and left
// no sockets to judge.
func sockdiagGone(s *snapshot.Snapshot) error {
	if msg, failed := s.Failed(snapshot.SourceSockdiag); failed && len(s.Sockets) == 0 {
		return diag.Unknownf("sock_diag failed: %s", msg)
	}
	return nil
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

// destAgg is one destination's ephemeral port use and the processes
// holding its open sockets (TIME_WAIT sockets have no owner).
type destAgg struct {
	use  portUse
	pids []int // in first-seen order, at most 8
	n    []int // open sockets per pid
}

func (a *destAgg) addOwner(pid int) {
	for i, p := range a.pids {
		if p == pid {
			a.n[i]++
			return
		}
	}
	if len(a.pids) < 8 {
		a.pids = append(a.pids, pid)
		a.n = append(a.n, 1)
	}
}

// topPid returns the pid holding most open sockets, 0 if none known.
func (a *destAgg) topPid() int {
	best, pid := 0, 0
	for i, p := range a.pids {
		if a.n[i] > best {
			best, pid = a.n[i], p
		}
	}
	return pid
}

// ownerList prints "nginx(pid 900) 812 sockets, ..." or why it is empty.
func (a *destAgg) ownerList(s *snapshot.Snapshot) string {
	if len(a.pids) == 0 {
		return "unknown: no open socket to this destination has a known owner (TIME_WAIT sockets belong to no process)"
	}
	parts := make([]string, len(a.pids))
	for i, p := range a.pids {
		parts[i] = fmt.Sprintf("%s %d open", owners(s, []int{p}), a.n[i])
	}
	return strings.Join(parts, ", ")
}

// destUsage groups the current outgoing sockets by (src, dst, dport) in
// one pass, and counts the previous sample's use of the same destinations.
func destUsage(in *diag.Input, e *ephemeral) map[destKey]*destAgg {
	m := map[destKey]*destAgg{}
	for i := range in.Cur.Sockets {
		sk := &in.Cur.Sockets[i]
		if !e.outgoing(sk) {
			continue
		}
		k := destKey{src: sk.Local.Addr(), dst: sk.Remote}
		a := m[k]
		if a == nil {
			a = &destAgg{}
			m[k] = a
		}
		var prev *snapshot.Socket
		if in.Prev != nil {
			prev = in.PrevSocket(sk.Cookie)
		}
		a.use.add(sk, prev)
		if sk.State != snapshot.TimeWait && len(sk.Pids) > 0 {
			a.addOwner(sk.Pids[0])
		}
	}
	if in.Prev != nil {
		for i := range in.Prev.Sockets {
			sk := &in.Prev.Sockets[i]
			if !e.outgoing(sk) {
				continue
			}
			if a := m[destKey{src: sk.Local.Addr(), dst: sk.Remote}]; a != nil {
				a.use.prevUsed++
			}
		}
	}
	return m
}

// scored is a finding with a score that orders it among findings of the
// same severity.
type scored struct {
	f     diag.Finding
	score float64
}

// rankFindings orders hits by severity, then score, both descending and
// stable, and keeps the first n; the rest are summed up by more.
func rankFindings(hits []scored, n int, more func(int) diag.Finding) []diag.Finding {
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].f.Severity != hits[j].f.Severity {
			return hits[i].f.Severity > hits[j].f.Severity
		}
		return hits[i].score > hits[j].score
	})
	fs := make([]diag.Finding, len(hits))
	for i := range hits {
		fs[i] = hits[i].f
	}
	return capFindings(fs, n, more)
}

// moreFinding sums up n findings left out: "n more <what> <verb>".
func moreFinding(s *snapshot.Snapshot, n int, what, verb, source string) diag.Finding {
	return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: s.Netns.Name},
		Summary:  fmt.Sprintf("%d more %s %s", n, what, verb),
		Evidence: []diag.Evidence{{Name: what + " not shown", Value: fmt.Sprint(n), Source: source}},
		Fixes:    []diag.Fix{{Scope: "application", Text: "see the findings above; the same fix applies"}}}
}

// pathEvidence is the path's rate, RTT and the BDP they make.
func pathEvidence(rate float64, rtt time.Duration, bdp float64, source string) diag.Evidence {
	return diag.Evidence{Name: "path", Value: fmt.Sprintf("%s x %s = BDP %s", fmtRate(rate), fmtRTT(rtt), fmtBytes(bdp)), Source: source + ", tcp_info.rtt"}
}

// destFinding is one destination a port rule fires on.
type destFinding struct {
	key destKey
	agg *destAgg
	f   portForecast
	sev diag.Severity
}

// destHits grades every destination's port use with grade and returns
// those that fire: most severe first, then larger rank, then by address.
func destHits(in *diag.Input, e *ephemeral, grade func(portUse, portForecast) diag.Severity, rank func(portUse) int) []destFinding {
	var hits []destFinding
	for k, a := range destUsage(in, e) {
		f := forecastPorts(a.use, e.usable(), in.Window())
		if sev := grade(a.use, f); sev > 0 {
			hits = append(hits, destFinding{k, a, f, sev})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].sev != hits[j].sev {
			return hits[i].sev > hits[j].sev
		}
		if ri, rj := rank(hits[i].agg.use), rank(hits[j].agg.use); ri != rj {
			return ri > rj
		}
		return hits[i].key.dst.String() < hits[j].key.dst.String()
	})
	return hits
}

// destFindings builds a finding for each of the first n hits and sums up
// the rest in one.
func destFindings(cur *snapshot.Snapshot, hits []destFinding, n int, build func(destFinding) diag.Finding) []diag.Finding {
	var fs []diag.Finding
	for i, h := range hits {
		if i == n {
			fs = append(fs, moreDestinations(cur, hits[i:]))
			break
		}
		fs = append(fs, build(h))
	}
	return fs
}

// commandOf returns the command of pid, "" if unknown.
func commandOf(s *snapshot.Snapshot, pid int) string {
	if p := s.Procs[pid]; p != nil {
		return p.Command
	}
	return ""
}

// portEvidence is the shared evidence for a destination's port use.
func portEvidence(e *ephemeral, u portUse, f portForecast, window time.Duration, threshold string) []diag.Evidence {
	ev := []diag.Evidence{
		{Name: "ephemeral ports in use to this destination", Value: fmt.Sprintf("%d of %d usable (%s): %d in TIME_WAIT, %d in other states", u.used, e.usable(), pct(f.frac), u.tw, u.used-u.tw),
			Source: "sock_diag sockets with an ephemeral local port, grouped by (source, destination, port)", Threshold: threshold},
		{Name: "usable ephemeral ports", Value: fmt.Sprintf("%d = %d-%d (%d ports) minus %d reserved", e.usable(), e.lo, e.hi, e.size(), e.nReserved),
			Source: "sysctl net.ipv4.ip_local_port_range, net.ipv4.ip_local_reserved_ports"},
	}
	if !f.hasRate {
		return ev
	}
	w := fmtDur(window)
	ev = append(ev,
		diag.Evidence{Name: "new connections", Value: fmt.Sprintf("%.1f/s (%d sockets new in %s; connections opened and gone within the window are not seen)", f.connRate, u.newConns, w), Source: "sock_diag cookies absent from the previous sample"},
		diag.Evidence{Name: "closed first by this host", Value: fmt.Sprintf("%.1f/s (%d entered TIME_WAIT in %s; each holds its port %s)", f.closeRate, u.newTW, w, fmtDur(timeWaitLen)), Source: "sock_diag TIME-WAIT sockets not in TIME-WAIT in the previous sample"},
		diag.Evidence{Name: "growth", Value: fmt.Sprintf("%+.1f ports/s (%d -> %d)", f.growth, u.prevUsed, u.used), Source: "sock_diag, previous and current sample"},
		forecastEvidence(f, e.usable()),
	)
	return ev
}

func forecastEvidence(f portForecast, usable int) diag.Evidence {
	ev := diag.Evidence{Name: "forecast", Source: "derived: open sockets + close rate x 60 s (TIME_WAIT length) against usable ports"}
	switch {
	case f.full:
		ev.Value = "exhausted now: the next connect() to this destination fails with EADDRNOTAVAIL"
	case f.exhausts:
		ev.Value = fmt.Sprintf("exhausted in about %s at %+.1f ports/s (this rate needs about %.0f ports, more than %d)", fmtDur(f.eta), f.growth, f.plateau, usable)
	default:
		ev.Value = fmt.Sprintf("at this rate use levels off near %.0f ports (%s of the range)", f.plateau, pct(f.plateau/float64(usable)))
	}
	return ev
}

// portPeak is the number of ports a destination needs: what it uses now
// or the level its churn settles at, whichever is larger.
func portPeak(u portUse, f portForecast) int {
	p := u.used
	if f.hasRate && int(f.plateau+0.5) > p {
		p = int(f.plateau + 0.5)
	}
	return p
}

// portFixKeepBelow is the share of the usable range that fixes aim to
// keep each destination under: the warning threshold of port-exhaustion.
const portFixKeepBelow = 0.7

// reuseFix is the first fix for outgoing churn: keep connections open.
func reuseFix(cmd string, dst netip.AddrPort) diag.Fix {
	f := diag.Fix{Scope: "application", Target: "connection-pool",
		Text: fmt.Sprintf("reuse connections to %s instead of opening one per request: a pool with keep-alive (HTTP keep-alive, JDBC/Redis pools, SMTP: keep the session and send RSET between mails)", dst),
		Risk: "pooled connections must be health-checked and evicted when idle, or they fail when the peer closes them"}
	switch {
	case strings.HasPrefix(cmd, "nginx"):
		f.Target = "nginx"
		f.Command = fmt.Sprintf("upstream backend { server %s; keepalive 64; }  location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; }", dst)
	case strings.HasPrefix(cmd, "java"):
		f.Target = "java"
		f.Command = "one shared client with a pool: Apache HttpClient PoolingHttpClientConnectionManager, OkHttp ConnectionPool, JavaMail: keep the Transport connected"
	}
	return f
}

// spreadFix computes how many destination ports, destination addresses
// or source addresses keep each 4-tuple space below portFixKeepBelow.
func spreadFix(peak, usable int) diag.Fix {
	k := max(2, ceilDiv(peak, int(float64(usable)*portFixKeepBelow)))
	return diag.Fix{Scope: "application", Target: "topology",
		Text:    fmt.Sprintf("each (source, destination, port) has its own %d ports; this destination needs about %d -> spread over %d destination ports or addresses (e.g. the backend listening on %d ports, or %d backend IPs), or %d source addresses", usable, peak, k, k, k, k),
		Command: "setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1); bind(fd, {src_i, port 0}); connect(fd, dst)  (nginx: proxy_bind $src sets it itself)",
		Risk:    "bind() to a source address without IP_BIND_ADDRESS_NO_PORT picks the port at bind time for every destination at once, and exhausts the range sooner"}
}

// widenRangeFix computes an ip_local_port_range that keeps peak below
// portFixKeepBelow, and the listener ports it must then reserve.
func widenRangeFix(e *ephemeral, peak int) (diag.Fix, bool) {
	need := int(float64(peak)/portFixKeepBelow+0.5) + e.nReserved
	hi := max(e.hi, 65535)
	lo := min(e.lo, max(1024, hi-need+1))
	if lo == e.lo && hi == e.hi {
		return diag.Fix{}, false
	}
	f := diag.Fix{Scope: "kernel", Target: "sysctl",
		Text:    fmt.Sprintf("widen the ephemeral range from %d ports to %d", e.size(), hi-lo+1),
		Command: fmt.Sprintf("sysctl -w net.ipv4.ip_local_port_range=\"%d %d\"", lo, hi),
		Risk:    "a port in the range can be taken by an outgoing connection before a service binds it: reserve the ports services listen on (ip_local_reserved_ports); per network namespace"}
	if hi-lo+1-e.nReserved < need-e.nReserved {
		f.Text += fmt.Sprintf(" (still short of the %d needed: spread destinations too)", need-e.nReserved)
	}
	var res []string
	for p := range e.listen {
		if int(p) >= lo && int(p) <= hi && !e.isReserved(int(p)) {
			res = append(res, fmt.Sprint(p))
		}
	}
	if len(res) > 0 {
		sort.Slice(res, func(i, j int) bool { return len(res[i]) < len(res[j]) || len(res[i]) == len(res[j]) && res[i] < res[j] })
		for _, r := range e.reserved {
			if r[0] == r[1] {
				res = append(res, fmt.Sprint(r[0]))
			} else {
				res = append(res, fmt.Sprintf("%d-%d", r[0], r[1]))
			}
		}
		f.Command += fmt.Sprintf(" && sysctl -w net.ipv4.ip_local_reserved_ports=%s", strings.Join(res, ","))
	}
	f.Command += "  (persist in /etc/sysctl.d/)"
	return f, true
}

func (e *ephemeral) isReserved(p int) bool {
	for _, r := range e.reserved {
		if p >= r[0] && p <= r[1] {
			return true
		}
	}
	return false
}

// twReuseFix proposes tcp_tw_reuse=1 unless it is already 1.
func twReuseFix(s *snapshot.Snapshot) (diag.Fix, bool) {
	v, ok := s.SysctlInt("net.ipv4.tcp_tw_reuse")
	if ok && v == 1 {
		return diag.Fix{}, false
	}
	now := "unknown"
	if ok {
		now = fmt.Sprint(v)
		if v == 2 {
			now = "2 (loopback only)"
		}
	}
	return diag.Fix{Scope: "kernel", Target: "sysctl",
		Text:    fmt.Sprintf("let connect() reuse a port held by TIME_WAIT to the same destination (now %s); helps outgoing connections only", now),
		Command: "sysctl -w net.ipv4.tcp_tw_reuse=1",
		Risk:    "needs TCP timestamps on both ends (net.ipv4.tcp_timestamps=1); does nothing for connections the peer opened; tcp_tw_recycle is gone since Linux 4.12 and tcp_fin_timeout does not shorten TIME_WAIT"}, true
}

// secondsDur converts seconds to a Duration.
func secondsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// fmtRTT prints a round-trip time: 60µs, 2.5ms, 20ms.
func fmtRTT(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return trimFloat(float64(d)/float64(time.Millisecond)) + "ms"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

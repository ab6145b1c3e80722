// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Flow is the connections one opener makes to one service: an address
// and port connected to. The opener is an address: its process is known
// only while one of its connections is open at a sample.
type Flow struct {
	Opener  netip.Addr
	Service netip.AddrPort
}

// FlowOf is the flow from opener to service, in IPv4 form where either is
// an IPv4-mapped IPv6 address: a dual-stack server's accepted sockets
// ([::ffff:127.0.0.1]:80, from a listener on [::]:80) and its IPv4
// clients' (127.0.0.1 -> 127.0.0.1:80) are one flow, and so are a Java
// client's IPv6 sockets to an IPv4 service.
func FlowOf(opener netip.Addr, service netip.AddrPort) Flow {
	return Flow{Opener: opener.Unmap(), Service: Unmapped(service)}
}

// Unmapped is ap with its address in IPv4 form if it is IPv4-mapped.
func Unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Churn is one flow's connection turnover over a window. Every connection
// closed with FIN leaves one TIME_WAIT socket, on the side that closed
// first, for 60 s; its timer dates the close. So a single sample counts
// the connections closed during the window on whichever side closed,
// even ones that lived less than a millisecond. A connection ended by a
// reset (close() with SO_LINGER 0, or with unread data) leaves none: the
// eBPF source counts the reset its close sent (ResetByOpener,
// ResetByService).
type Churn struct {
	Flow
	Window time.Duration
	// ClosedByOpener and ClosedByService count TIME_WAIT sockets that
	// entered TIME_WAIT during the window on each side.
	ClosedByOpener, ClosedByService int
	// ResetByOpener and ResetByService count connections each side ended
	// with a reset of its own close (AbortiveClose reasons) over the eBPF
	// source's interval, ResetInterval: no TIME_WAIT is left of them.
	ResetByOpener, ResetByService int
	ResetInterval                 time.Duration
	// ClosedRecent counts those younger than Recent, on either side: a
	// fast churn recycles TIME_WAIT sockets within the window (connect()
	// reuses them after tcp_tw_reuse_delay; a new SYN to a server-side one
	// replaces it), so the window undercounts and the recent count does not.
	ClosedRecent int
	Recent       time.Duration
	// ClosedOld counts the closed connections the previous sample had
	// established: already open then (a restart, a pool draining, the
	// end of a load), not new connections per request.
	ClosedOld int
	// Open counts the flow's connections open now (opener-side sockets
	// when the opener is in this namespace, else service-side); OpenNew
	// those of them the previous sample did not have (known only with
	// one).
	Open, OpenNew int
	// Exchanges is the median, over the open connections counted in Open
	// that report them, of min(data segments in, data segments out) since
	// each began: about the request/response turns a connection has
	// carried so far (0 when unknown). One request per connection shows 1.
	Exchanges uint32
	// LocalService says the service listens in this namespace; LocalOpener
	// that opener-side sockets were seen here.
	LocalService, LocalOpener bool
	Openers                   Tally // owners of open opener-side sockets
	Server                    Tally // owners of the service's listener
	// Connects is the eBPF source's count of connect() calls to Service
	// from this namespace over its interval; nil without events, or when
	// the opener is not known to be here.
	Connects *Connects
	// flowOwned: Openers came from the collector's second look.
	flowOwned bool
}

// Closed is the number of connections closed during the window, with a
// FIN (TIME_WAIT) or a reset.
func (c *Churn) Closed() int {
	return c.ClosedByOpener + c.ClosedByService + c.ResetByOpener + c.ResetByService
}

// Resets is the number of connections ended by a reset of either side's
// own close.
func (c *Churn) Resets() int { return c.ResetByOpener + c.ResetByService }

// ServiceCloses says whether the service ended more of the connections
// than the opener did, by FIN or reset.
func (c *Churn) ServiceCloses() bool {
	return c.ClosedByService+c.ResetByService > c.ClosedByOpener+c.ResetByOpener
}

// AbortiveClose says whether a reset sent for this reason (the kernel's
// sk_rst_reason) ended a connection its own side closed, leaving no
// TIME_WAIT: close() with SO_LINGER 0 or connect(AF_UNSPEC) (TCP_STATE,
// measured on 6.18), close() with unread data (TCP_ABORT_ON_CLOSE:
// Node's server.maxConnections closes newcomers so), data arriving after
// close (TCP_ABORT_ON_DATA), the FIN_WAIT2 timeout (TCP_ABORT_ON_LINGER),
// or a disconnect with data queued (TCP_DISCONNECT_WITH_DATA).
func AbortiveClose(reason string) bool {
	switch reason {
	case "TCP_STATE", "TCP_ABORT_ON_CLOSE", "TCP_ABORT_ON_LINGER", "TCP_ABORT_ON_DATA", "TCP_DISCONNECT_WITH_DATA":
		return true
	}
	return false
}

// Rate is connections opened per second as the eBPF source counted them
// when it did, else connections closed per second, over the window or,
// when higher, over the recent horizon: in steady state, the rate they
// are opened at. Closes of connections open at the previous sample that
// new ones did not replace (ClosedOld beyond OpenNew: a restart, a pool
// draining, the end of a load) are not openings and are left out.
func (c *Churn) Rate() float64 {
	if r, ok := c.MeasuredRate(); ok {
		return r
	}
	r := c.CloseRate()
	if gone := c.Unreplaced(); gone > 0 {
		if w := min(c.Window, TimeWaitLen).Seconds(); w > 0 {
			r = max(r-float64(gone)/w, 0)
		}
	}
	return r
}

// Unreplaced is how many of the connections closed in the window were
// established at the previous sample and not replaced by new ones
// (ClosedOld beyond OpenNew), at least 0.
func (c *Churn) Unreplaced() int { return max(c.ClosedOld-c.OpenNew, 0) }

// CloseRate is connections closed per second from TIME_WAIT sockets, over
// the window or, when higher, over the recent horizon.
func (c *Churn) CloseRate() float64 {
	w := min(c.Window, TimeWaitLen).Seconds()
	if w <= 0 {
		return 0
	}
	r := float64(c.ClosedByOpener+c.ClosedByService) / w
	if c.Recent > 0 {
		r = max(r, float64(c.ClosedRecent)/c.Recent.Seconds())
	}
	if n := c.Resets(); n > 0 {
		iv := c.ResetInterval
		if iv <= 0 {
			iv = c.Window
		}
		r += float64(n) / iv.Seconds()
	}
	return r
}

// MeasuredRate is the new connections per second the eBPF source
// counted; ok is false without them.
func (c *Churn) MeasuredRate() (float64, bool) {
	if c.Connects == nil || c.Connects.Interval <= 0 || c.Connects.Opened() == 0 {
		return 0, false
	}
	return float64(c.Connects.Opened()) / c.Connects.Interval.Seconds(), true
}

// Lifetime is the mean time a connection stays open (Little's law: open
// connections / rate); 0 when the rate is 0.
func (c *Churn) Lifetime() time.Duration {
	r := c.Rate()
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(c.Open) / r * float64(time.Second))
}

// NewLifetime is Little's law over the connections opened in the window
// only (OpenNew): a pool's long-lived connections beside one-request ones
// to the same service raise Lifetime, not this. It is at most about the
// window (nothing older counts).
func (c *Churn) NewLifetime() time.Duration {
	r := c.Rate()
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(c.OpenNew) / r * float64(time.Second))
}

// ChurnOf measures every flow of s over window (the time since the
// previous sample, looked up by prev). Flows with no connection closed in
// the window are left out.
func ChurnOf(s *snapshot.Snapshot, prev PrevState, window time.Duration) []*Churn {
	if window <= 0 {
		return nil
	}
	ls := ListenersOf(s)
	m := map[Flow]*Churn{}
	// TIME_WAIT younger than the reuse delay cannot have been taken over.
	recent := min(window, time.Second, ReuseOf(s).Delay)
	get := func(f Flow) *Churn {
		c := m[f]
		if c == nil {
			c = &Churn{Flow: f, Window: window, Recent: recent}
			m[f] = c
		}
		return c
	}
	// First the closes: they decide which flows exist.
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.TimeWait || !ClosedInWindow(sk, prev, window) {
			continue
		}
		var c *Churn
		if ls.Of(sk) != nil {
			c = get(FlowOf(sk.Remote.Addr(), sk.Local.AddrPort()))
			c.ClosedByService++
		} else {
			c = get(FlowOf(sk.Local.Addr(), sk.Remote.AddrPort()))
			c.ClosedByOpener++
		}
		if TimeWaitAge(sk) < recent {
			c.ClosedRecent++
		}
		// A TIME_WAIT socket keeps its connection's cookie: one the
		// previous sample had established was already open then.
		if prev != nil {
			if st, was := prev(sk); was && st == snapshot.Established {
				c.ClosedOld++
			}
		}
	}
	resetCloses(s, ls, m, get, window)
	if len(m) == 0 {
		return []*Churn{} // no close in the window: no flow to look behind
	}
	// Then who is behind them: open connections and listeners.
	serverOpen, serverNew := map[Flow]int{}, map[Flow]int{}
	// Turns of the open connections, opener side and service side.
	openerTurns, serverTurns := map[Flow][]uint32{}, map[Flow][]uint32{}
	turns := func(sk *snapshot.Socket) (uint32, bool) {
		var tb snapshot.TCPInfo
		ti := sk.TCP(&tb)
		if !ti.Has(snapshot.EndDataSegsOut) {
			return 0, false
		}
		return min(ti.DataSegsIn, ti.DataSegsOut), true
	}
	isNew := func(sk *snapshot.Socket) bool {
		if prev == nil {
			return false
		}
		_, was := prev(sk)
		return !was
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		switch sk.State {
		case snapshot.Listen, snapshot.TimeWait, snapshot.Close, snapshot.BoundInactive:
			continue
		}
		if ls.Of(sk) != nil {
			if f := FlowOf(sk.Remote.Addr(), sk.Local.AddrPort()); m[f] != nil {
				serverOpen[f]++
				if isNew(sk) {
					serverNew[f]++
				}
				if n, ok := turns(sk); ok {
					serverTurns[f] = append(serverTurns[f], n)
				}
			}
			continue
		}
		f := FlowOf(sk.Local.Addr(), sk.Remote.AddrPort())
		if c := m[f]; c != nil {
			if n, ok := turns(sk); ok {
				openerTurns[f] = append(openerTurns[f], n)
			}
			c.Open++
			if isNew(sk) {
				c.OpenNew++
			}
			c.LocalOpener = true
			if pid, _ := s.Owner(sk); pid != 0 {
				c.Openers.Add(pid)
			}
		}
	}
	// Openers too quick for the owner scan, named by the collector's
	// second look (snapshot.FlowOwners).
	for _, fo := range s.FlowOwners {
		// Only for flows whose open sockets named no one (flowOwned: the
		// tally already holds earlier flow owners).
		if c := m[FlowOf(fo.Local, fo.Remote)]; c != nil && (c.Openers.Len() == 0 || c.flowOwned) {
			c.flowOwned = true
			c.LocalOpener = true
			for range max(fo.Sockets, 1) {
				c.Openers.Add(fo.Pid)
			}
		}
	}
	// connect() calls the eBPF source counted go to the flow whose opener
	// is here; a service with one flow takes them too (the calls were made
	// in this namespace, so its opener is here).
	if byDst, ok := ConnectsOf(s); ok {
		perService := map[netip.AddrPort]int{}
		for f := range m {
			perService[f.Service]++
		}
		for f, c := range m {
			if c.LocalOpener || c.ClosedByOpener+c.ResetByOpener > 0 || perService[f.Service] == 1 {
				if cn := byDst.To(f.Service); cn.Opens > 0 || c.LocalOpener || c.ClosedByOpener+c.ResetByOpener > 0 {
					c.Connects = cn
					c.LocalOpener = c.LocalOpener || cn.Opens > 0
				}
			}
		}
	}
	out := make([]*Churn, 0, len(m))
	for f, c := range m {
		ts := openerTurns[f]
		if !c.LocalOpener {
			c.Open, c.OpenNew = serverOpen[f], serverNew[f]
			ts = serverTurns[f]
		}
		if len(ts) > 0 {
			slices.Sort(ts)
			c.Exchanges = ts[len(ts)/2]
		}
		// A TIME_WAIT or a reset close on the opener's side proves the
		// opener is here too.
		if c.ClosedByOpener+c.ResetByOpener > 0 {
			c.LocalOpener = true
		}
		if ln := ls.Of(&snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(f.Service)}); ln != nil {
			c.LocalService = true
			for _, pid := range ln.Pids.List() {
				c.Server.Add(pid)
			}
		}
		out = append(out, c)
	}
	return out
}

// resetCloses adds to m the connections ended by a reset of their own
// side's close that the eBPF source counted (no TIME_WAIT is left of
// them), making flows of them where no TIME_WAIT did. Only sent resets
// count: the other side's received one is the same connection.
func resetCloses(s *snapshot.Snapshot, ls Listeners, m map[Flow]*Churn, get func(Flow) *Churn, window time.Duration) {
	ev := s.Events
	if ev == nil || !ev.Has(snapshot.ProgResetsSent) {
		return
	}
	iv := ev.Interval()
	if iv <= 0 {
		iv = window
	}
	for _, r := range ev.Resets {
		// The opener's side (the service's address and port, LocalPort
		// 0) or the service's (the opener's address, port 0, and the
		// port it was accepted on, ResetPort).
		if !r.Sent || !AbortiveClose(r.Reason) || r.Count == 0 || r.LocalPort != 0 && r.Remote.Port() != 0 {
			continue
		}
		var c *Churn
		if r.Remote.Port() != 0 {
			// The opener's socket: Remote is the service.
			svc := Unmapped(r.Remote)
			c = get(FlowOf(openerAddr(s, ls, m, svc), svc))
			c.ResetByOpener += int(r.Count)
		} else {
			// The service's accepted socket: Remote is the opener.
			port, ok := ResetPort(s, r)
			if !ok {
				continue
			}
			opener := r.Remote.Addr().Unmap()
			c = get(FlowOf(opener, serviceAddr(s, m, opener, port)))
			c.ResetByService += int(r.Count)
		}
		c.ResetInterval = iv
	}
}

// openerAddr is the local address connections to svc leave from: that of
// a flow already known, else of a socket of s connected to svc, else
// 127.0.0.1 (::1) for a loopback service; else unspecified (unknown).
func openerAddr(s *snapshot.Snapshot, ls Listeners, m map[Flow]*Churn, svc netip.AddrPort) netip.Addr {
	for f := range m {
		if f.Service == svc && f.Opener.IsValid() && !f.Opener.IsUnspecified() {
			return f.Opener
		}
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen || ls.Of(sk) != nil {
			continue
		}
		if Unmapped(sk.Remote.AddrPort()) == svc {
			return sk.Local.Addr().Unmap()
		}
	}
	switch a := svc.Addr(); {
	case a.Is4() && a.IsLoopback():
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case a.IsLoopback():
		return netip.IPv6Loopback()
	case a.Is4():
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// serviceAddr is the address:port a connection from opener accepted on
// port reached: that of a flow already known from opener to the port,
// else of the listener bound to a specific address, else (a wildcard
// listener) the opener's own address when it is a loopback one, else
// unspecified.
func serviceAddr(s *snapshot.Snapshot, m map[Flow]*Churn, opener netip.Addr, port uint16) netip.AddrPort {
	for f := range m {
		if f.Opener == opener && f.Service.Port() == port {
			return f.Service
		}
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen && sk.Local.Port() == port && !sk.Local.IsUnspecified() {
			return Unmapped(sk.Local.AddrPort())
		}
	}
	if opener.IsLoopback() {
		return netip.AddrPortFrom(opener, port)
	}
	if opener.Is4() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), port)
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConns is the default cap on connections open at once.
const DefaultMaxConns = 64

// ScrapeTimeout bounds the gathering of one /metrics response (promhttp
// answers 503 after it). A scrape only copies prepared samples, so it
// takes milliseconds (docs/performance.md); this is the outer bound.
const ScrapeTimeout = 10 * time.Second

// ServerOptions bound what an HTTP client can hold of the exporter
// (docs/exporter.md, "Connections and timeouts").
type ServerOptions struct {
	// MaxConns is the most connections open at once. A connection
	// accepted at the cap closes the oldest one not inside a request.
	MaxConns int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout and
	// MaxHeaderBytes are http.Server's.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	// Logf reports accepts failing for lack of file descriptors, at
	// most once a minute; nil is silent.
	Logf func(format string, args ...any)
	// Now spaces those reports; time.Now when nil.
	Now func() time.Time
}

// DefaultServerOptions are the settings of `tcpdoctor serve`.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{
		MaxConns:          DefaultMaxConns,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// From the end of the request header to the last byte written:
		// the gathering's bound plus time to send the body to a slow
		// client.
		WriteTimeout:   ScrapeTimeout + 20*time.Second,
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 8 << 10,
	}
}

// MaxConnsForFileLimit lowers want to a quarter of soft, the soft
// RLIMIT_NOFILE (0: unknown, want stands), so HTTP clients can never take
// the descriptors a collection needs. It is at least 1.
func MaxConnsForFileLimit(want int, soft uint64) int {
	if soft == 0 || uint64(want) <= soft/4 {
		return want
	}
	return max(1, int(soft/4))
}

// NewServer returns the exporter's HTTP server for h and the listener to
// pass to its Serve: ln wrapped to hold at most o.MaxConns connections.
// The Listener is also a prometheus.Collector of its own counts.
func NewServer(h http.Handler, ln net.Listener, o ServerOptions) (*http.Server, *Listener) {
	l := newListener(ln, o.MaxConns, o.Logf, o.Now)
	srv := &http.Server{
		Handler:           l.track(h),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ConnState:         l.connState,
		ConnContext:       l.connContext,
	}
	return srv, l
}

// Eviction reasons, the values of the reason label.
const (
	reasonCap     = "max_connections"
	reasonFdLimit = "fd_limit"
)

// Listener caps the connections open at once. A connection is evictable
// when it is not inside a request: accepted and not yet through its
// request header (slow or silent clients, a TLS handshake), or idle
// between keep-alive requests. A connection accepted at the cap closes
// an evictable one, in this order (docs/exporter.md, "Scrapes are served
// first"): first those idle after requests (with authentication
// required: requests that never authenticated), the one active most
// recently first, so a scraper's connection idle between its scrapes is
// the last of them; then those not yet through their first request,
// the one waiting longest first. With authentication required, a
// connection that authenticated is never closed for a new one. When
// none is evictable (every connection is being answered, each bounded by
// WriteTimeout, or authenticated), Accept waits, and new clients wait in
// the kernel's accept queue, holding none of our descriptors.
type Listener struct {
	net.Listener
	max  int
	logf func(format string, args ...any)
	// auth: requests must authenticate (--web.config.file with users).
	auth bool

	mu      sync.Mutex
	changed *sync.Cond // a connection closed or left a request
	conns   map[*conn]struct{}
	seq     uint64 // orders connections by when they became evictable
	closed  bool
	done    chan struct{} // closed by Close
	evicted map[string]float64
	// Accepts that ran out of descriptors: all, and since fdSaid, the
	// last report.
	fdErrors float64
	fdUnsaid int
	fdSaid   time.Time
	now      func() time.Time

	descOpen, descMax, descEvicted, descFdErrors *prometheus.Desc
}

func newListener(ln net.Listener, maxConns int, logf func(string, ...any), now func() time.Time) *Listener {
	if maxConns < 1 {
		maxConns = 1
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if now == nil {
		now = time.Now
	}
	l := &Listener{
		Listener: ln, max: maxConns, logf: logf, now: now,
		conns:   map[*conn]struct{}{},
		done:    make(chan struct{}),
		evicted: map[string]float64{reasonCap: 0, reasonFdLimit: 0},
		descOpen: prometheus.NewDesc("tcpdoctor_http_connections",
			"HTTP connections open to the exporter, idle ones included.", nil, nil),
		descMax: prometheus.NewDesc("tcpdoctor_http_max_connections",
			"The cap on HTTP connections open at once (--max-connections, lowered to a quarter of RLIMIT_NOFILE).", nil, nil),
		descEvicted: prometheus.NewDesc("tcpdoctor_http_connections_evicted_total",
			"Connections not inside a request closed to make room: at the cap (max_connections) or when accept ran out of file descriptors (fd_limit).", []string{"reason"}, nil),
		descFdErrors: prometheus.NewDesc("tcpdoctor_http_accept_fd_limit_errors_total",
			"Accepts that failed for lack of file descriptors (EMFILE, ENFILE) and were retried.", nil, nil),
	}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// conn is one accepted connection; its fields are guarded by l.mu.
type conn struct {
	net.Conn
	l     *Listener
	busy  bool   // inside a request, from the handler to the response's end
	since uint64 // l.seq when it last became evictable
	gone  bool   // closed and no longer counted
	// served: a response was written (it went idle after a request);
	// authed: a request on it authenticated; refused: one did not.
	served, authed, refused bool
	// client is the address it comes from, without the port.
	client string
}

// refused marks the connection of a request refused authentication:
// closed first for a new one from now on, even while its 401 is written.
func refused(r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*conn); ok {
		c.l.mu.Lock()
		c.refused = true
		c.l.mu.Unlock()
	}
}

// probationSlots is how many connections may be open beyond the cap
// while every other one is authenticated and idle: a newcomer that
// authenticates then closes one of those (the cap holds again), one that
// does not is the first closed.
const probationSlots = 1

// probationLocked: a new connection may be accepted beyond the cap to
// prove itself, since only authenticated idle ones could make room.
func (l *Listener) probationLocked() bool {
	return l.auth && len(l.conns) < l.max+probationSlots && l.pickLocked(true) != nil
}

// requireAuth tells the listener that requests must authenticate: a
// connection that did is never closed for a new one.
func (l *Listener) requireAuth() {
	l.mu.Lock()
	l.auth = true
	l.mu.Unlock()
}

// Close stops counting the connection and closes it.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *Listener) dropLocked(c *conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.conns, c)
	l.changed.Broadcast()
}

// Accept waits until there is room (fewer than the cap open, or one it
// may close), accepts, and makes room for the new connection by closing the
// oldest evictable one at the cap: one descriptor over the cap for that
// moment. Running out of file descriptors is not returned (the HTTP
// server would log it at each retry): Accept closes the oldest evictable
// connection to free one, or backs off up to a second, and says so
// through Logf at most once a minute.
func (l *Listener) Accept() (net.Conn, error) {
	if err := l.waitRoom(); err != nil {
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		nc, err := l.Listener.Accept()
		if err == nil {
			return l.add(nc), nil
		}
		if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
			return nil, err
		}
		l.noteFdLimit(err)
		if l.evict(reasonFdLimit) {
			continue
		}
		if !l.sleep(wait) {
			return nil, net.ErrClosed
		}
		wait = min(2*wait, time.Second)
	}
}

// noteFdLimit counts an accept that ran out of descriptors and reports
// it, with the count since the last report, at most once a minute.
func (l *Listener) noteFdLimit(err error) {
	l.mu.Lock()
	l.fdErrors++
	l.fdUnsaid++
	now := l.now()
	if !l.fdSaid.IsZero() && now.Sub(l.fdSaid) < time.Minute {
		l.mu.Unlock()
		return
	}
	n := l.fdUnsaid
	l.fdSaid, l.fdUnsaid = now, 0
	l.mu.Unlock()
	l.logf("exporter: %v (%d failed accepts since the last note, said at most once a minute): closing idle HTTP connections to free descriptors", err, n)
}

// waitRoom waits while the cap is reached and every connection is
// inside a request; meanwhile new clients wait in the kernel's accept
// queue.
func (l *Listener) waitRoom() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max && l.pickLocked(false) == nil && !l.probationLocked() {
		if l.closed {
			return net.ErrClosed
		}
		l.changed.Wait()
	}
	return nil
}

// evict closes an evictable connection (pickLocked; for want of
// descriptors, an authenticated one last); false if there is none.
func (l *Listener) evict(reason string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.pickLocked(reason == reasonFdLimit)
	if c == nil {
		return false
	}
	l.evictLocked(c, reason)
	return true
}

func (l *Listener) evictLocked(c *conn, reason string) {
	l.dropLocked(c)
	l.evicted[reason]++
	// Closing the socket ends the server's read on it; the server then
	// finds the connection closed.
	_ = c.Conn.Close()
}

// Eviction classes.
const (
	classIdle   = iota // idle after requests (with auth: none authenticated)
	classFresh         // not yet through its first request
	classAuthed        // authenticated: never closed for a new connection
)

func (l *Listener) classLocked(c *conn) int {
	switch {
	case l.auth && c.authed:
		return classAuthed
	case c.served || l.auth && c.refused:
		return classIdle
	}
	return classFresh
}

// rankLocked orders the classes for closing, lowest first: with
// authentication, connections whose requests were refused, then those
// still in their handshake or first request; without it, those before
// their first request (a client that connects and is slow to ask), then
// idle ones.
func (l *Listener) rankLocked(k int) int {
	switch {
	case k == classAuthed:
		return 2
	case l.auth == (k == classIdle):
		return 0
	}
	return 1
}

// pickLocked is the connection to close for a new one, nil if none may
// be; authed allows an authenticated one. Per-client fairness first: a
// connection of the client address holding the most connections; among
// its connections, by rankLocked, idle ones active most recently first
// (a scraper idle between scrapes is the last), others waiting longest
// first.
func (l *Listener) pickLocked(authed bool) *conn {
	held := map[string]int{}
	for c := range l.conns {
		held[c.client]++
	}
	var best *conn
	bestRank := 0
	for c := range l.conns {
		if c.busy {
			continue
		}
		k := l.classLocked(c)
		if k == classAuthed && !authed {
			continue
		}
		r := l.rankLocked(k)
		switch {
		case best == nil:
		case (r == 2) != (bestRank == 2): // authenticated ones only when nothing else is
			if r == 2 {
				continue
			}
		case held[c.client] != held[best.client]:
			if held[c.client] < held[best.client] {
				continue
			}
		case r != bestRank:
			if r > bestRank {
				continue
			}
		case k == classIdle:
			if c.since < best.since {
				continue
			}
		default:
			if c.since > best.since {
				continue
			}
		}
		best, bestRank = c, r
	}
	return best
}

// sleep waits d or until the listener is closed (false).
func (l *Listener) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// add tracks nc, first closing the oldest evictable connection at the
// cap. If all became busy since waitRoom, it waits for one (nc held).
func (l *Listener) add(nc net.Conn) *conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max && !l.closed {
		if c := l.pickLocked(false); c != nil {
			l.evictLocked(c, reasonCap)
			continue
		}
		if l.probationLocked() {
			break
		}
		l.changed.Wait()
	}
	l.seq++
	c := &conn{Conn: nc, l: l, since: l.seq, client: nc.RemoteAddr().String()}
	if h, _, err := net.SplitHostPort(c.client); err == nil {
		c.client = h
	}
	l.conns[c] = struct{}{}
	return c
}

// Close stops accepting and wakes a waiting Accept. Open connections are
// the server's to close (http.Server.Shutdown or Close).
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	l.changed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

type connKey struct{}

// ours is the connection Accept returned under nc: nc itself, or the one
// a TLS connection (--web.config.file) wraps.
func ours(nc net.Conn) (*conn, bool) {
	if w, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = w.NetConn()
	}
	c, ok := nc.(*conn)
	return c, ok
}

// connContext hands each request its connection (http.Server.ConnContext).
func (l *Listener) connContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := ours(nc); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// connState makes a connection evictable again once its response is
// written and it waits for the next request (http.Server.ConnState).
func (l *Listener) connState(nc net.Conn, st http.ConnState) {
	c, ok := ours(nc)
	if !ok || st != http.StateIdle {
		return
	}
	l.mu.Lock()
	c.busy = false
	c.served = true
	l.seq++
	c.since = l.seq
	l.changed.Broadcast()
	l.mu.Unlock()
}

// track marks a connection busy from the handler's start: a request
// being answered is never evicted. (http.StateActive comes with the
// first byte of a request, so a client dribbling a header would count as
// busy.)
func (l *Listener) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*conn); ok {
			_, authed := authenticated(r)
			l.mu.Lock()
			c.busy = true
			c.authed = c.authed || authed
			// Accepted beyond the cap and now authenticated: another
			// connection makes room, an authenticated idle one if need be.
			for authed && len(l.conns) > l.max {
				v := l.pickLocked(true)
				if v == nil {
					break
				}
				l.evictLocked(v, reasonCap)
			}
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// Describe sends the listener's metric descriptions.
func (l *Listener) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.descOpen
	ch <- l.descMax
	ch <- l.descEvicted
	ch <- l.descFdErrors
}

// Collect sends the open connections, the cap and the evictions.
func (l *Listener) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	open := float64(len(l.conns))
	ev := map[string]float64{reasonCap: l.evicted[reasonCap], reasonFdLimit: l.evicted[reasonFdLimit]}
	fdErrors := l.fdErrors
	l.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(l.descOpen, prometheus.GaugeValue, open)
	ch <- prometheus.MustNewConstMetric(l.descMax, prometheus.GaugeValue, float64(l.max))
	for _, r := range []string{reasonCap, reasonFdLimit} {
		ch <- prometheus.MustNewConstMetric(l.descEvicted, prometheus.CounterValue, ev[r], r)
	}
	ch <- prometheus.MustNewConstMetric(l.descFdErrors, prometheus.CounterValue, fdErrors)
}

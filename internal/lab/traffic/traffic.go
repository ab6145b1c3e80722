// SPDX-License-Identifier: Apache-2.0

// Package traffic holds the lab's traffic generators: rpc, bulk, storm,
// churn (with a proxy) and bigresponse. Each has a server and a client that
// run in-process with a context and a config, and return a JSON-serialisable
// result. The hidden `tcpdoctor-lab traffic` command runs them as processes.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/tcpdoctor/tcpdoctor/internal/units"
	"golang.org/x/sys/unix"
)

// Buffers are socket buffer sizes in bytes; 0 leaves the kernel autotuning
// (setsockopt is never called). They are set before listen/connect so that
// window scaling is negotiated accordingly.
type Buffers struct {
	SndBuf int `json:"sndbuf"`
	RcvBuf int `json:"rcvbuf"`
}

func (b Buffers) validate() error {
	if b.SndBuf < 0 || b.RcvBuf < 0 {
		return fmt.Errorf("negative buffer size (sndbuf %d, rcvbuf %d)", b.SndBuf, b.RcvBuf)
	}
	return nil
}

func (b Buffers) apply(fd int) error {
	if b.SndBuf > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, b.SndBuf); err != nil {
			return fmt.Errorf("setsockopt SO_SNDBUF %d: %w", b.SndBuf, err)
		}
	}
	if b.RcvBuf > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, b.RcvBuf); err != nil {
			return fmt.Errorf("setsockopt SO_RCVBUF %d: %w", b.RcvBuf, err)
		}
	}
	return nil
}

// control is a net.Dialer / net.ListenConfig Control func.
func (b Buffers) control(_, _ string, c syscall.RawConn) error {
	if b.SndBuf == 0 && b.RcvBuf == 0 {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) { serr = b.apply(int(fd)) }); err != nil {
		return err
	}
	return serr
}

func (b Buffers) dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: b.control}
}

// startListening is every server's start: a context that ends after d (0:
// with ctx), and a listener open in it (openListener), its address passed
// to ready when set. The caller defers cancel once err is nil.
func startListening(ctx context.Context, d time.Duration, addr string, backlog int, b Buffers, ready func(addr string)) (context.Context, context.CancelFunc, net.Listener, error) {
	ctx, cancel := runCtx(ctx, d)
	ln, err := openListener(ctx, addr, backlog, b)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	return ctx, cancel, ln, nil
}

// openListener opens a TCP listener with buffers set before listen(2).
// With backlog 0 Go's default applies (net.core.somaxconn); otherwise
// listen(2) gets exactly backlog (the kernel still caps it at somaxconn).
func openListener(ctx context.Context, addr string, backlog int, b Buffers) (net.Listener, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if backlog < 0 {
		return nil, fmt.Errorf("negative backlog %d", backlog)
	}
	if backlog == 0 {
		lc := net.ListenConfig{Control: b.control}
		return lc.Listen(ctx, "tcp", addr)
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := ta.IP.To4(); ta.IP == nil || ip4 != nil {
		s := &unix.SockaddrInet4{Port: ta.Port}
		if ip4 != nil {
			copy(s.Addr[:], ip4)
		}
		sa = s
	} else {
		family = unix.AF_INET6
		s := &unix.SockaddrInet6{Port: ta.Port}
		copy(s.Addr[:], ta.IP.To16())
		sa = s
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close() // FileListener dups the fd
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, fmt.Errorf("setsockopt SO_REUSEADDR: %w", err)
	}
	if err := b.apply(fd); err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return net.FileListener(f)
}

// ErrnoName classifies a network error for counting: the errno name
// ("ECONNREFUSED", "EADDRNOTAVAIL", "ETIMEDOUT"...), "timeout" for our own
// deadline, "canceled", "EOF", or "other".
func ErrnoName(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.As(err, &errno):
		if n := unix.ErrnoName(errno); n != "" {
			return n
		}
		return fmt.Sprintf("errno%d", int(errno))
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// Latency summarises durations in milliseconds.
type Latency struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MinMs  float64 `json:"min_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.5) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	return Latency{
		Count:  len(s),
		MeanMs: ms(sum / time.Duration(len(s))),
		P50Ms:  q(0.50),
		P90Ms:  q(0.90),
		P99Ms:  q(0.99),
		MinMs:  ms(s[0]),
		MaxMs:  ms(s[len(s)-1]),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) * 8 / d.Seconds() / 1e6
}

// ConnInfo is one socket's buffers and TCP_INFO at a moment, as the
// generator saw it from its own side.
type ConnInfo struct {
	SndBuf          int    `json:"sndbuf"` // SO_SNDBUF read back: twice a pinned value
	RcvBuf          int    `json:"rcvbuf"`
	SndWscale       uint8  `json:"snd_wscale"`
	RcvWscale       uint8  `json:"rcv_wscale"`
	RTTUs           uint32 `json:"rtt_us"`
	SndCwnd         uint32 `json:"snd_cwnd"`
	SndWnd          uint32 `json:"snd_wnd"`
	RcvWnd          uint32 `json:"rcv_wnd"`
	TotalRetrans    uint32 `json:"total_retrans"`
	BusyUs          uint64 `json:"busy_us"`
	RwndLimitedUs   uint64 `json:"rwnd_limited_us"`
	SndbufLimitedUs uint64 `json:"sndbuf_limited_us"`
	BytesSent       uint64 `json:"bytes_sent"`
	BytesReceived   uint64 `json:"bytes_received"`
}

// String says c in words for the lab's log: "sndbuf 2.2M, rcvbuf 128K,
// rtt 20.1ms, cwnd 10, ...".
func (c ConnInfo) String() string {
	pct := func(part uint64) string {
		if c.BusyUs == 0 {
			return "-"
		}
		return units.Pct(float64(part) / float64(c.BusyUs))
	}
	return fmt.Sprintf("sndbuf %s, rcvbuf %s, rtt %s, cwnd %d, peer window %s, our window %s, %d retransmitted, busy %s (rwnd-limited %s, sndbuf-limited %s), sent %s, received %s",
		units.Bytes(float64(c.SndBuf)), units.Bytes(float64(c.RcvBuf)), units.RTT(time.Duration(c.RTTUs)*time.Microsecond), c.SndCwnd,
		units.Bytes(float64(c.SndWnd)), units.Bytes(float64(c.RcvWnd)), c.TotalRetrans, units.Dur(time.Duration(c.BusyUs)*time.Microsecond),
		pct(c.RwndLimitedUs), pct(c.SndbufLimitedUs), units.Bytes(float64(c.BytesSent)), units.Bytes(float64(c.BytesReceived)))
}

// connInfo reads ConnInfo from a TCP connection; nil if it cannot.
func connInfo(c net.Conn) *ConnInfo {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var ci *ConnInfo
	_ = rc.Control(func(fd uintptr) {
		ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		snd, _ := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		rcv, _ := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		// x/sys's TCPInfo hides the wscale nibbles in padding at byte 6;
		// the kernel fills them (snd_wscale low nibble, rcv_wscale high).
		ws := (*[8]byte)(unsafe.Pointer(ti))[6]
		ci = &ConnInfo{
			SndBuf: snd, RcvBuf: rcv,
			SndWscale: ws & 0xf, RcvWscale: ws >> 4,
			RTTUs: ti.Rtt, SndCwnd: ti.Snd_cwnd, SndWnd: ti.Snd_wnd, RcvWnd: ti.Rcv_wnd,
			TotalRetrans: ti.Total_retrans,
			BusyUs:       ti.Busy_time, RwndLimitedUs: ti.Rwnd_limited, SndbufLimitedUs: ti.Sndbuf_limited,
			BytesSent: ti.Bytes_sent, BytesReceived: ti.Bytes_received,
		}
	})
	return ci
}

// runCtx bounds ctx by d when d > 0.
func runCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// pace waits until the i-th event of a schedule at rate per second from
// start; rate <= 0 means no wait. It returns false when ctx is done.
func pace(ctx context.Context, start time.Time, i int, rate float64) bool {
	if rate <= 0 {
		return ctx.Err() == nil
	}
	at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
	return sleepCtx(ctx, time.Until(at))
}

// sleepCtx sleeps d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// connSet tracks open connections so they can all be closed at the end.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func newConnSet() *connSet { return &connSet{m: map[net.Conn]struct{}{}} }

// add records c and returns how many are open.
func (s *connSet) add(c net.Conn) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[c] = struct{}{}
	return len(s.m)
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		c.Close()
	}
	clear(s.m)
}

// zeros is a read-only chunk of payload bytes.
func zeros(n int) []byte { return make([]byte, n) }

// payload returns net.Buffers covering n bytes of chunk (reused, read-only).
func payload(chunk []byte, n int) net.Buffers {
	var bufs net.Buffers
	for n > 0 {
		k := min(n, len(chunk))
		bufs = append(bufs, chunk[:k])
		n -= k
	}
	return bufs
}

// serveConns accepts on ln until ctx is done, running handle for each
// connection; at the end it closes the listener and every connection and
// waits for the handlers. It returns how many connections were accepted
// and the most that were open at once.
func serveConns(ctx context.Context, ln net.Listener, handle func(ctx context.Context, c net.Conn)) (accepted, maxOpen int) {
	conns := newConnSet()
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			// EMFILE and friends: back off briefly rather than spin.
			if !sleepCtx(ctx, 10*time.Millisecond) {
				break
			}
			continue
		}
		accepted++
		maxOpen = max(maxOpen, conns.add(c))
		wg.Go(func() {
			defer conns.remove(c)
			defer c.Close()
			handle(ctx, c)
		})
	}
	ln.Close()
	conns.closeAll()
	wg.Wait()
	return accepted, maxOpen
}

// counts is a concurrency-safe errno histogram.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

// addErr counts err by errno name unless the run is over (ctx done).
func (e *counts) addErr(ctx context.Context, err error) {
	if ctx.Err() == nil {
		e.add(ErrnoName(err))
	}
}

func (e *counts) add(k string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[k]++
}

// snapshot copies the counts; nil when there are none.
func (e *counts) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m) == 0 {
		return nil
	}
	out := make(map[string]int, len(e.m))
	for k, v := range e.m {
		out[k] = v
	}
	return out
}

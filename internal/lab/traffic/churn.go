// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// churn protocol: the client sends u32 request length, u32 wanted response
// length and the request; the server answers; repeat until the client
// closes. The client closes first, so it holds TIME_WAIT.
const (
	churnHeader  = 8
	churnMaxSize = 1 << 20
)

// Churn client modes.
const (
	ModeShort = "short" // a new connection per request
	ModePool  = "pool"  // requests over Pool keep-alive connections (the fix)
	ModeHold  = "hold"  // open Hold connections and keep them all
)

// ChurnServerConfig configures the churn server.
type ChurnServerConfig struct {
	Addr     string
	Backlog  int
	Buffers  Buffers
	Duration time.Duration // 0: until ctx is done
	Ready    func(addr string)
}

// ChurnServerResult counts connections and requests served.
type ChurnServerResult struct {
	Addr     string         `json:"addr"`
	Conns    int            `json:"conns"`
	MaxOpen  int            `json:"max_open"`
	Requests int64          `json:"requests"`
	Errors   map[string]int `json:"errors,omitempty"`
}

// RunChurnServer serves churn requests until ctx is done or cfg.Duration
// passes.
func RunChurnServer(ctx context.Context, cfg ChurnServerConfig) (ChurnServerResult, error) {
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return ChurnServerResult{}, fmt.Errorf("traffic: churn: %w", err)
	}
	defer cancel()
	res := ChurnServerResult{Addr: ln.Addr().String()}
	var reqs atomic.Int64
	var errs counts
	chunk := zeros(64 << 10)
	res.Conns, res.MaxOpen = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		br := bufio.NewReader(c)
		hdr := make([]byte, churnHeader)
		for {
			if _, err := io.ReadFull(br, hdr); err != nil {
				if !errors.Is(err, io.EOF) {
					errs.addErr(ctx, err)
				}
				return
			}
			reqLen, respLen := binary.BigEndian.Uint32(hdr), binary.BigEndian.Uint32(hdr[4:])
			if reqLen > churnMaxSize || respLen > churnMaxSize {
				errs.add("bad-frame")
				return
			}
			if _, err := br.Discard(int(reqLen)); err != nil {
				return
			}
			bufs := payload(chunk, int(respLen))
			if _, err := bufs.WriteTo(c); err != nil {
				errs.addErr(ctx, err)
				return
			}
			reqs.Add(1)
		}
	})
	res.Requests = reqs.Load()
	res.Errors = errs.snapshot()
	return res, nil
}

// ChurnClientConfig configures the churn client. Count or Duration bounds
// the run (in hold mode Hold does).
type ChurnClientConfig struct {
	Addr        string
	Rate        float64 // requests (or, in hold mode, connects) started per second; 0: as fast as Concurrency allows
	Count       int     // requests, 0: until Duration
	Duration    time.Duration
	Concurrency int // requests in flight at most, default 64
	Pool        int // > 0: reuse this many keep-alive connections
	Hold        int // > 0: open this many connections and keep them until Duration ends
	ReqSize     int // default 64
	RespSize    int // default 64
	Timeout     time.Duration
	Linger0     bool // close with RST (SO_LINGER 0): no TIME_WAIT, unsent data lost
	Buffers     Buffers
}

// ChurnSecond is one second of the run.
type ChurnSecond struct {
	Second int            `json:"second"`
	OK     int            `json:"ok"`
	Errors map[string]int `json:"errors,omitempty"`
}

// ChurnClientResult counts successes and failures by errno; EADDRNOTAVAIL
// means the local ports are exhausted, "canceled" that the run ended first.
type ChurnClientResult struct {
	Mode      string         `json:"mode"`
	Attempts  int            `json:"attempts"`
	OK        int            `json:"ok"`
	Failed    int            `json:"failed"`
	Errors    map[string]int `json:"errors,omitempty"`
	NewConns  int64          `json:"new_conns"`      // connections opened
	Held      int            `json:"held,omitempty"` // hold mode: connects that succeeded (the peer may close some since)
	Latency   Latency        `json:"latency"`        // per request (connect included when new)
	Seconds   float64        `json:"seconds"`
	OKPerSec  float64        `json:"ok_per_sec"`
	PerSecond []ChurnSecond  `json:"per_second"`
}

// churnStats gathers outcomes per second.
type churnStats struct {
	mu    sync.Mutex
	start time.Time
	secs  []ChurnSecond
	lat   []time.Duration
	errs  map[string]int
	ok    int
}

func (s *churnStats) record(took time.Duration, errName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := int(time.Since(s.start) / time.Second)
	for len(s.secs) <= sec {
		s.secs = append(s.secs, ChurnSecond{Second: len(s.secs)})
	}
	cs := &s.secs[sec]
	if errName == "" {
		cs.OK++
		s.ok++
		s.lat = append(s.lat, took)
		return
	}
	if cs.Errors == nil {
		cs.Errors = map[string]int{}
	}
	cs.Errors[errName]++
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	s.errs[errName]++
}

// RunChurnClient runs the churn client.
func RunChurnClient(ctx context.Context, cfg ChurnClientConfig) (ChurnClientResult, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 64
	}
	if cfg.ReqSize == 0 {
		cfg.ReqSize = 64
	}
	if cfg.RespSize == 0 {
		cfg.RespSize = 64
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	mode := ModeShort
	switch {
	case cfg.Pool > 0 && cfg.Hold > 0:
		return ChurnClientResult{}, fmt.Errorf("traffic: churn: pool and hold together")
	case cfg.Pool > 0:
		mode = ModePool
	case cfg.Hold > 0:
		mode = ModeHold
		cfg.Count = cfg.Hold
	}
	switch {
	case cfg.Rate < 0 || cfg.Count < 0 || cfg.Concurrency < 0 || cfg.Pool < 0 || cfg.Hold < 0 || cfg.Timeout < 0:
		return ChurnClientResult{}, fmt.Errorf("traffic: churn: negative rate, count, concurrency, pool, hold or timeout")
	case cfg.ReqSize < 0 || cfg.ReqSize > churnMaxSize || cfg.RespSize < 0 || cfg.RespSize > churnMaxSize:
		return ChurnClientResult{}, fmt.Errorf("traffic: churn: request or response size out of [0, %d]", churnMaxSize)
	case cfg.Count == 0 && cfg.Duration <= 0:
		return ChurnClientResult{}, fmt.Errorf("traffic: churn: need a count or a duration")
	}
	if err := cfg.Buffers.validate(); err != nil {
		return ChurnClientResult{}, fmt.Errorf("traffic: churn: %w", err)
	}
	ctx, cancel := runCtx(ctx, cfg.Duration)
	defer cancel()

	d := cfg.Buffers.dialer(0)
	var newConns atomic.Int64
	dial := func(ctx context.Context) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", cfg.Addr)
		if err == nil {
			newConns.Add(1)
		}
		return c, err
	}
	closeConn := func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok && cfg.Linger0 {
			tc.SetLinger(0)
		}
		c.Close()
	}
	req := make([]byte, churnHeader+cfg.ReqSize)
	binary.BigEndian.PutUint32(req, uint32(cfg.ReqSize))
	binary.BigEndian.PutUint32(req[4:], uint32(cfg.RespSize))
	exchange := func(c net.Conn, buf []byte) error {
		c.SetDeadline(time.Now().Add(cfg.Timeout))
		if _, err := c.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}

	var (
		pool  chan net.Conn
		heldM sync.Mutex
		held  []net.Conn
	)
	if mode == ModePool {
		pool = make(chan net.Conn, cfg.Pool)
		for range cfg.Pool {
			pool <- nil
		}
	}
	one := func() error {
		rctx, rcancel := context.WithTimeout(ctx, cfg.Timeout)
		defer rcancel()
		buf := make([]byte, cfg.RespSize)
		switch mode {
		case ModeHold:
			c, err := dial(rctx)
			if err != nil {
				return err
			}
			heldM.Lock()
			held = append(held, c)
			heldM.Unlock()
			return nil
		case ModePool:
			var c net.Conn
			select {
			case c = <-pool:
			case <-rctx.Done():
				return rctx.Err()
			}
			var err error
			if c == nil {
				if c, err = dial(rctx); err != nil {
					pool <- nil
					return err
				}
			}
			if err = exchange(c, buf); err != nil {
				closeConn(c)
				c = nil
			}
			pool <- c
			return err
		default:
			c, err := dial(rctx)
			if err != nil {
				return err
			}
			defer closeConn(c)
			return exchange(c, buf)
		}
	}

	st := &churnStats{start: time.Now()}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	attempts := 0
loop:
	for i := 0; (cfg.Count == 0 || i < cfg.Count) && pace(ctx, st.start, i, cfg.Rate); i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		attempts++
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			err := one()
			if err != nil && ctx.Err() != nil {
				st.record(0, "canceled") // cut short by the end of the run
				return
			}
			st.record(time.Since(t0), ErrnoName(err))
		})
	}
	wg.Wait()
	if mode == ModeHold && cfg.Duration > 0 {
		<-ctx.Done()
	}
	for _, c := range held {
		closeConn(c)
	}
	if pool != nil {
		for range cfg.Pool {
			if c := <-pool; c != nil {
				closeConn(c)
			}
		}
	}
	el := time.Since(st.start)
	res := ChurnClientResult{
		Mode: mode, Attempts: attempts, OK: st.ok, Errors: st.errs,
		NewConns: newConns.Load(), Held: len(held),
		Latency: summarize(st.lat), Seconds: el.Seconds(), PerSecond: st.secs,
	}
	for _, n := range st.errs {
		res.Failed += n
	}
	if res.PerSecond == nil {
		res.PerSecond = []ChurnSecond{}
	}
	if el > 0 {
		res.OKPerSec = float64(res.OK) / el.Seconds()
	}
	return res, nil
}

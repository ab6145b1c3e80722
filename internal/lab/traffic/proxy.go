// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ProxyConfig configures a TCP proxy that opens a new upstream connection
// per client connection, round-robin over Backends (like nginx without
// upstream keepalive). When the client closes, the proxy closes upstream
// first, so the proxy holds the upstream TIME_WAIT.
type ProxyConfig struct {
	Addr           string
	Backends       []string // ip:port
	Sources        []string // local IPs to connect from, round-robin; empty: the kernel picks
	Backlog        int
	Buffers        Buffers // for both sides
	ConnectTimeout time.Duration
	Duration       time.Duration // 0: until ctx is done
	Ready          func(addr string)
}

// ProxyResult counts what the proxy did. UpstreamErrors are upstream
// connect failures by errno (EADDRNOTAVAIL: the proxy ran out of ports).
type ProxyResult struct {
	Addr           string         `json:"addr"`
	Accepted       int            `json:"accepted"`
	MaxActive      int            `json:"max_active"`
	UpstreamOK     int64          `json:"upstream_ok"`
	UpstreamFailed int64          `json:"upstream_failed"`
	UpstreamErrors map[string]int `json:"upstream_errors,omitempty"`
	PerBackend     map[string]int `json:"per_backend"` // successful upstream connects
	BytesUp        int64          `json:"bytes_up"`
	BytesDown      int64          `json:"bytes_down"`
}

// RunProxy proxies until ctx is done or cfg.Duration passes.
func RunProxy(ctx context.Context, cfg ProxyConfig) (ProxyResult, error) {
	if len(cfg.Backends) == 0 {
		return ProxyResult{}, fmt.Errorf("traffic: proxy: no backends")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	var sources []*net.TCPAddr
	for _, s := range cfg.Sources {
		ip := net.ParseIP(s)
		if ip == nil {
			return ProxyResult{}, fmt.Errorf("traffic: proxy: bad source address %q", s)
		}
		sources = append(sources, &net.TCPAddr{IP: ip})
	}
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return ProxyResult{}, fmt.Errorf("traffic: proxy: %w", err)
	}
	defer cancel()
	res := ProxyResult{Addr: ln.Addr().String()}
	var (
		next       atomic.Uint64
		ok, failed atomic.Int64
		up, down   atomic.Int64
		errs       counts
		mu         sync.Mutex
		perBackend = map[string]int{}
	)
	res.Accepted, res.MaxActive = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		i := next.Add(1) - 1
		backend := cfg.Backends[i%uint64(len(cfg.Backends))]
		d := cfg.Buffers.dialer(cfg.ConnectTimeout)
		if len(sources) > 0 {
			d.LocalAddr = sources[i%uint64(len(sources))]
		}
		u, err := d.DialContext(ctx, "tcp", backend)
		if err != nil {
			if ctx.Err() == nil {
				failed.Add(1)
				errs.add(ErrnoName(err))
			}
			return
		}
		ok.Add(1)
		mu.Lock()
		perBackend[backend]++
		mu.Unlock()
		defer u.Close()
		stop := context.AfterFunc(ctx, func() { u.Close() })
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() {
			n, _ := io.Copy(u, c)
			up.Add(n)
			closeWrite(u)
		})
		n, _ := io.Copy(c, u)
		down.Add(n)
		closeWrite(c)
		wg.Wait()
	})
	res.UpstreamOK, res.UpstreamFailed = ok.Load(), failed.Load()
	res.BytesUp, res.BytesDown = up.Load(), down.Load()
	res.PerBackend = perBackend
	res.UpstreamErrors = errs.snapshot()
	return res, nil
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
		return
	}
	c.Close()
}

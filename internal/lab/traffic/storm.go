// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// StormServerConfig configures a listener that accepts slowly or never.
type StormServerConfig struct {
	Addr       string
	Backlog    int     // listen(2) backlog, default 128 (the kernel caps it at somaxconn)
	AcceptRate float64 // accepts per second; 0: never accepts; < 0: as fast as possible
	Buffers    Buffers
	Duration   time.Duration // 0: until ctx is done
	Ready      func(addr string)
}

// StormServerResult counts what the listener accepted. Accepted
// connections are held open until the end.
type StormServerResult struct {
	Addr     string `json:"addr"`
	Backlog  int    `json:"backlog"`
	Accepted int    `json:"accepted"`
}

// RunStormServer listens and accepts at cfg.AcceptRate until ctx is done
// or cfg.Duration passes.
func RunStormServer(ctx context.Context, cfg StormServerConfig) (StormServerResult, error) {
	if cfg.Backlog == 0 {
		cfg.Backlog = 128
	}
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return StormServerResult{}, fmt.Errorf("traffic: storm: %w", err)
	}
	defer cancel()
	defer ln.Close()
	res := StormServerResult{Addr: ln.Addr().String(), Backlog: cfg.Backlog}
	if cfg.AcceptRate == 0 {
		<-ctx.Done()
		return res, nil
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	for i := 0; pace(ctx, start, i, cfg.AcceptRate); i++ {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !sleepCtx(ctx, 10*time.Millisecond) {
				break
			}
			continue
		}
		held = append(held, c)
		res.Accepted++
	}
	return res, nil
}

// StormClientConfig configures a connection storm: Count connects started
// at Rate per second, each with its own timeout, held open until Duration
// ends.
type StormClientConfig struct {
	Addr           string
	Count          int
	Rate           float64       // connects started per second; 0: all at once
	ConnectTimeout time.Duration // per connect, default 5 s
	Duration       time.Duration // hold time from the start; 0: end when every connect is done
	Buffers        Buffers
}

// StormClientResult is what the storm saw. ConnectTime covers successful
// connects; a SYN retransmission shows as a step of about 1 s. Connects
// still pending when Duration ends count as "canceled".
type StormClientResult struct {
	Attempted    int            `json:"attempted"`
	Connected    int            `json:"connected"`
	Failed       int            `json:"failed"`
	Errors       map[string]int `json:"errors,omitempty"`
	SlowConnects int            `json:"slow_connects"` // took 1 s or more
	ConnectTime  Latency        `json:"connect_time"`
	Seconds      float64        `json:"seconds"`
}

// RunStormClient runs the storm.
func RunStormClient(ctx context.Context, cfg StormClientConfig) (StormClientResult, error) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.Count < 0 || cfg.Rate < 0 || cfg.ConnectTimeout < 0 {
		return StormClientResult{}, fmt.Errorf("traffic: storm: negative count, rate or timeout")
	}
	if err := cfg.Buffers.validate(); err != nil {
		return StormClientResult{}, fmt.Errorf("traffic: storm: %w", err)
	}
	ctx, cancel := runCtx(ctx, cfg.Duration)
	defer cancel()
	d := cfg.Buffers.dialer(0)
	var (
		mu    sync.Mutex
		held  []net.Conn
		times []time.Duration
		errs  counts
		fails atomic.Int64
	)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	res := StormClientResult{}
	var wg sync.WaitGroup
	for i := 0; i < cfg.Count && pace(ctx, start, i, cfg.Rate); i++ {
		res.Attempted++
		wg.Go(func() {
			dctx, dcancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
			defer dcancel()
			t0 := time.Now()
			c, err := d.DialContext(dctx, "tcp", cfg.Addr)
			took := time.Since(t0)
			if err != nil {
				fails.Add(1)
				if ctx.Err() != nil {
					errs.add("canceled")
				} else {
					errs.add(ErrnoName(err))
				}
				return
			}
			mu.Lock()
			held = append(held, c)
			times = append(times, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	if cfg.Duration > 0 {
		<-ctx.Done()
	}
	res.Seconds = time.Since(start).Seconds()
	res.Connected, res.Failed = len(held), int(fails.Load())
	res.ConnectTime = summarize(times)
	for _, t := range times {
		if t >= time.Second {
			res.SlowConnects++
		}
	}
	res.Errors = errs.snapshot()
	return res, nil
}

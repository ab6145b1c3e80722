// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// slowAnswer is the slow HTTP server's whole response.
const slowAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"

// SlowHTTPServerConfig configures an HTTP upstream that answers each
// request after Delay (a slow backend behind a proxy).
type SlowHTTPServerConfig struct {
	Addr     string
	Delay    time.Duration
	Duration time.Duration // 0: until ctx is done
	Ready    func(addr string)
}

// SlowHTTPServerResult counts what it answered.
type SlowHTTPServerResult struct {
	Addr     string         `json:"addr"`
	Conns    int            `json:"conns"`
	MaxOpen  int            `json:"max_open"`
	Answered int64          `json:"answered"`
	Errors   map[string]int `json:"errors,omitempty"`
}

// RunSlowHTTPServer reads each request's header, waits Delay, answers
// 200 and closes, until ctx is done or cfg.Duration passes.
func RunSlowHTTPServer(ctx context.Context, cfg SlowHTTPServerConfig) (SlowHTTPServerResult, error) {
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, 0, Buffers{}, cfg.Ready)
	if err != nil {
		return SlowHTTPServerResult{}, fmt.Errorf("traffic: slow-http: %w", err)
	}
	defer cancel()
	res := SlowHTTPServerResult{Addr: ln.Addr().String()}
	var answered atomic.Int64
	var errs counts
	res.Conns, res.MaxOpen = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		if err := readHeader(bufio.NewReader(c)); err != nil {
			if !errors.Is(err, io.EOF) {
				errs.addErr(ctx, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.Delay):
		}
		if _, err := io.WriteString(c, slowAnswer); err != nil {
			errs.addErr(ctx, err)
			return
		}
		answered.Add(1)
	})
	res.Answered = answered.Load()
	res.Errors = errs.snapshot()
	return res, nil
}

// readHeader reads up to the blank line ending an HTTP request header.
func readHeader(br *bufio.Reader) error {
	for n := 0; n < 100; n++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
	return errors.New("header too long")
}

// HoldHTTPClientConfig configures Clients HTTP clients, each sending one
// request at a time (Connection: close) and waiting for the whole answer,
// trying again Retry after a failure, for Duration.
type HoldHTTPClientConfig struct {
	Addr     string
	Clients  int
	Retry    time.Duration
	Timeout  time.Duration // per request, connect included
	Duration time.Duration
}

// HoldHTTPClientResult counts answers and failures: "closed" is a
// connection the server closed without an answer (before reading the
// request, as a server at a connection limit of its own does), "reset"
// one it reset; the rest are errno names.
type HoldHTTPClientResult struct {
	Clients  int            `json:"clients"`
	Answers  int            `json:"answers"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"`
	Seconds  float64        `json:"seconds"`
	Attempts int            `json:"attempts"`
}

// RunHoldHTTPClient runs the clients until cfg.Duration passes.
func RunHoldHTTPClient(ctx context.Context, cfg HoldHTTPClientConfig) (HoldHTTPClientResult, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 {
		return HoldHTTPClientResult{}, errors.New("traffic: hold-http: --clients and --duration must be positive")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	res := HoldHTTPClientResult{Clients: cfg.Clients}
	var errs counts
	req := []byte("GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
	one := func() (ok bool) {
		d := net.Dialer{Timeout: cfg.Timeout}
		c, err := d.DialContext(ctx, "tcp", cfg.Addr)
		if err != nil {
			errs.addErr(ctx, err)
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(cfg.Timeout))
		if _, err := c.Write(req); err != nil {
			errs.addErr(ctx, err)
			return false
		}
		b, err := io.ReadAll(c)
		switch {
		case bytes.HasPrefix(b, []byte("HTTP/1.1 200")):
			return true
		case err != nil:
			errs.addErr(ctx, err)
		case len(b) == 0:
			if ctx.Err() == nil {
				errs.add("closed")
			}
		default:
			errs.add("answer " + string(b[9:min(12, len(b))]))
		}
		return false
	}
	var wg sync.WaitGroup
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ok := one()
				mu.Lock()
				res.Attempts++
				if ok {
					res.Answers++
				}
				mu.Unlock()
				if !ok {
					select {
					case <-ctx.Done():
					case <-time.After(cfg.Retry):
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Errors = errs.snapshot()
	for _, v := range res.Errors {
		res.Failed += v
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// bigresponse speaks a small subset of HTTP/1.1: "GET /bytes/N" (or "/"
// for the server's default size) on keep-alive connections, answered with
// Content-Length N and N bytes.
const bigMaxSize = 1 << 30

// BigServerConfig configures the bigresponse server.
type BigServerConfig struct {
	Addr     string
	Size     int64 // default response size, default 3,400,000 bytes
	Backlog  int
	Buffers  Buffers
	Count    int           // stop after this many responses, 0: no limit
	Duration time.Duration // 0: until ctx is done (or Count)
	Ready    func(addr string)
}

// BigServed is one response as the server wrote it: WriteMs runs from the
// first byte written until the last was accepted by the socket, ConnInfo
// (cumulative for the connection) is taken then.
type BigServed struct {
	Bytes    int64     `json:"bytes"`
	WriteMs  float64   `json:"write_ms"`
	ConnInfo *ConnInfo `json:"conn_info,omitempty"`
}

// BigServerResult lists the responses served.
type BigServerResult struct {
	Addr      string         `json:"addr"`
	Conns     int            `json:"conns"`
	Responses []BigServed    `json:"responses"`
	Errors    map[string]int `json:"errors,omitempty"`
}

// RunBigServer serves until ctx is done, cfg.Duration passes or cfg.Count
// responses are written.
func RunBigServer(ctx context.Context, cfg BigServerConfig) (BigServerResult, error) {
	if cfg.Size == 0 {
		cfg.Size = 3_400_000
	}
	if cfg.Size < 0 || cfg.Size > bigMaxSize || cfg.Count < 0 {
		return BigServerResult{}, fmt.Errorf("traffic: bigresponse: size %d or count %d out of range", cfg.Size, cfg.Count)
	}
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return BigServerResult{}, fmt.Errorf("traffic: bigresponse: %w", err)
	}
	defer cancel()
	res := BigServerResult{Addr: ln.Addr().String(), Responses: []BigServed{}}
	var mu sync.Mutex
	var errs counts
	chunk := zeros(256 << 10)
	res.Conns, _ = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			size, err := readBigRequest(br, cfg.Size)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					errs.add(ErrnoName(err))
					fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				}
				return
			}
			t0 := time.Now()
			// One err for both writes: the send's error was scoped to the
			// if and lost before (ineffassign).
			_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", size)
			if err == nil {
				err = send(c, chunk, size)
			}
			if err != nil {
				errs.addErr(ctx, err)
				return
			}
			s := BigServed{Bytes: size, WriteMs: ms(time.Since(t0)), ConnInfo: connInfo(c)}
			mu.Lock()
			res.Responses = append(res.Responses, s)
			done := cfg.Count > 0 && len(res.Responses) >= cfg.Count
			mu.Unlock()
			if done {
				cancel()
				return
			}
		}
	})
	res.Errors = errs.snapshot()
	return res, nil
}

// readBigRequest reads one request and returns the size asked for;
// io.EOF when the client closed cleanly between requests.
func readBigRequest(br *bufio.Reader, def int64) (int64, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		if line == "" && err == io.EOF {
			return 0, io.EOF
		}
		return 0, err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "GET" || !strings.HasPrefix(f[2], "HTTP/1.") {
		return 0, fmt.Errorf("bad request line %q", strings.TrimSpace(line))
	}
	size := def
	if rest, ok := strings.CutPrefix(f[1], "/bytes/"); ok {
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n < 0 || n > bigMaxSize {
			return 0, fmt.Errorf("bad size in %q", f[1])
		}
		size = n
	}
	for { // headers are read and ignored
		h, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if h == "\r\n" || h == "\n" {
			return size, nil
		}
	}
}

// BigClientConfig configures the bigresponse client: Requests sequential
// requests on one keep-alive connection.
type BigClientConfig struct {
	Addr     string
	Size     int64   // bytes to ask for, 0: the server's default
	Requests int     // default 1
	LinkRate float64 // bits/s of the path, for the ideal time; 0: none
	Buffers  Buffers
	Timeout  time.Duration // per request, default 30 s
}

// BigRequest is one response as the client saw it: TotalMs from the
// request to the last byte, TransferMs from the first byte to the last;
// Start (just before the request was written) and End (the last byte
// read) on the wall clock, the one a trace's header starts on.
type BigRequest struct {
	Bytes      int64     `json:"bytes"`
	TotalMs    float64   `json:"total_ms"`
	TransferMs float64   `json:"transfer_ms"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
}

// BigClientResult sums up the requests; IdealMs = bytes*8/LinkRate and the
// ratios are mean times over the ideal (0 without a link rate).
type BigClientResult struct {
	Requests      []BigRequest `json:"requests"`
	MeanTotalMs   float64      `json:"mean_total_ms"`
	MeanTransfer  float64      `json:"mean_transfer_ms"`
	IdealMs       float64      `json:"ideal_ms,omitempty"`
	TotalRatio    float64      `json:"total_ratio,omitempty"`
	TransferRatio float64      `json:"transfer_ratio,omitempty"`
	Buffers       Buffers      `json:"buffers"` // as asked
	ConnInfo      *ConnInfo    `json:"conn_info,omitempty"`
}

// RunBigClient makes the requests.
func RunBigClient(ctx context.Context, cfg BigClientConfig) (BigClientResult, error) {
	if cfg.Requests == 0 {
		cfg.Requests = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Size < 0 || cfg.Size > bigMaxSize || cfg.Requests < 0 || cfg.LinkRate < 0 {
		return BigClientResult{}, fmt.Errorf("traffic: bigresponse: size %d, requests %d or link rate %g out of range", cfg.Size, cfg.Requests, cfg.LinkRate)
	}
	if err := cfg.Buffers.validate(); err != nil {
		return BigClientResult{}, fmt.Errorf("traffic: bigresponse: %w", err)
	}
	c, err := cfg.Buffers.dialer(cfg.Timeout).DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return BigClientResult{}, fmt.Errorf("traffic: bigresponse: dial %s: %w", cfg.Addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()

	path := "/"
	if cfg.Size > 0 {
		path = fmt.Sprintf("/bytes/%d", cfg.Size)
	}
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, cfg.Addr)
	br := bufio.NewReaderSize(c, 256<<10)
	res := BigClientResult{Buffers: cfg.Buffers, Requests: []BigRequest{}}
	var total, transfer time.Duration
	for i := range cfg.Requests {
		if ctx.Err() == nil {
			c.SetDeadline(time.Now().Add(cfg.Timeout))
		}
		t0 := time.Now()
		if _, err := io.WriteString(c, req); err != nil {
			return res, fmt.Errorf("traffic: bigresponse: request %d: %w", i, err)
		}
		if _, err := br.Peek(1); err != nil {
			return res, fmt.Errorf("traffic: bigresponse: request %d: %w", i, err)
		}
		t1 := time.Now()
		n, err := readBigResponse(br)
		if err != nil {
			return res, fmt.Errorf("traffic: bigresponse: request %d: %w", i, err)
		}
		t2 := time.Now()
		total += t2.Sub(t0)
		transfer += t2.Sub(t1)
		res.Requests = append(res.Requests, BigRequest{Bytes: n, TotalMs: ms(t2.Sub(t0)), TransferMs: ms(t2.Sub(t1)), Start: t0, End: t2})
	}
	res.ConnInfo = connInfo(c)
	if n := len(res.Requests); n > 0 {
		res.MeanTotalMs = ms(total) / float64(n)
		res.MeanTransfer = ms(transfer) / float64(n)
		if cfg.LinkRate > 0 {
			res.IdealMs = float64(res.Requests[0].Bytes) * 8 / cfg.LinkRate * 1000
			if res.IdealMs > 0 {
				res.TotalRatio = res.MeanTotalMs / res.IdealMs
				res.TransferRatio = res.MeanTransfer / res.IdealMs
			}
		}
	}
	return res, nil
}

// readBigResponse reads a status line, headers and Content-Length bytes.
func readBigResponse(br *bufio.Reader) (int64, error) {
	status, err := br.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] != "200" {
		return 0, fmt.Errorf("status %q", strings.TrimSpace(status))
	}
	size := int64(-1)
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if h == "\r\n" || h == "\n" {
			break
		}
		if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			if size, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || size < 0 {
				return 0, fmt.Errorf("bad content length %q", strings.TrimSpace(v))
			}
		}
	}
	if size < 0 {
		return 0, fmt.Errorf("no content length")
	}
	n, err := br.Discard(int(size))
	return int64(n), err
}

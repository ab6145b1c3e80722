// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// rpc frames, big-endian:
//
//	request:  u32 request length, u32 wanted response length, u64 id, payload
//	response: u32 response length, u64 id, payload
//
// Many requests are in flight on one connection, as with Dubbo.
const (
	rpcReqHeader  = 16
	rpcRespHeader = 12
	rpcMaxFrame   = 64 << 20
)

// RPCServerConfig configures the rpc server: one reader goroutine per
// connection (a single IO thread), a worker per request that sleeps the
// think time, then writes the response (writes serialised per connection).
type RPCServerConfig struct {
	Addr     string
	Backlog  int // 0: Go's default (somaxconn)
	Buffers  Buffers
	ThinkMin time.Duration
	ThinkMax time.Duration     // think time is uniform in [ThinkMin, ThinkMax]
	Duration time.Duration     // 0: until ctx is done
	Ready    func(addr string) // called once listening
}

// RPCServerResult is what the rpc server did.
type RPCServerResult struct {
	Addr        string         `json:"addr"`
	Conns       int            `json:"conns"`
	Requests    int64          `json:"requests"`
	BytesIn     int64          `json:"bytes_in"`
	BytesOut    int64          `json:"bytes_out"`
	MaxInFlight int64          `json:"max_in_flight"`
	Errors      map[string]int `json:"errors,omitempty"`
}

// RunRPCServer serves rpc until ctx is done or cfg.Duration passes.
func RunRPCServer(ctx context.Context, cfg RPCServerConfig) (RPCServerResult, error) {
	if cfg.ThinkMin < 0 || cfg.ThinkMax < cfg.ThinkMin {
		return RPCServerResult{}, fmt.Errorf("traffic: rpc: bad think time [%v, %v]", cfg.ThinkMin, cfg.ThinkMax)
	}
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return RPCServerResult{}, fmt.Errorf("traffic: rpc: %w", err)
	}
	defer cancel()
	res := RPCServerResult{Addr: ln.Addr().String()}
	var reqs, in, out, inflight, maxInflight atomic.Int64
	var errs counts
	chunk := zeros(256 << 10)
	res.Conns, _ = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		var wmu sync.Mutex
		var workers sync.WaitGroup
		defer workers.Wait()
		br := bufio.NewReaderSize(c, 64<<10)
		hdr := make([]byte, rpcReqHeader)
		for {
			if _, err := io.ReadFull(br, hdr); err != nil {
				if !errors.Is(err, io.EOF) {
					errs.addErr(ctx, err)
				}
				return
			}
			reqLen := binary.BigEndian.Uint32(hdr[0:])
			respLen := binary.BigEndian.Uint32(hdr[4:])
			id := binary.BigEndian.Uint64(hdr[8:])
			if reqLen > rpcMaxFrame || respLen > rpcMaxFrame {
				errs.add("bad-frame")
				return
			}
			if _, err := br.Discard(int(reqLen)); err != nil {
				errs.addErr(ctx, err)
				return
			}
			in.Add(int64(reqLen) + rpcReqHeader)
			n := inflight.Add(1)
			for m := maxInflight.Load(); n > m && !maxInflight.CompareAndSwap(m, n); m = maxInflight.Load() {
			}
			think := cfg.ThinkMin
			if cfg.ThinkMax > cfg.ThinkMin {
				think += rand.N(cfg.ThinkMax - cfg.ThinkMin + 1)
			}
			workers.Go(func() {
				defer inflight.Add(-1)
				if !sleepCtx(ctx, think) {
					return
				}
				rh := make([]byte, rpcRespHeader)
				binary.BigEndian.PutUint32(rh[0:], respLen)
				binary.BigEndian.PutUint64(rh[4:], id)
				bufs := append(net.Buffers{rh}, payload(chunk, int(respLen))...)
				wmu.Lock()
				_, err := bufs.WriteTo(c)
				wmu.Unlock()
				if err != nil {
					errs.addErr(ctx, err)
					c.Close()
					return
				}
				reqs.Add(1)
				out.Add(int64(respLen) + rpcRespHeader)
			})
		}
	})
	res.Requests, res.BytesIn, res.BytesOut = reqs.Load(), in.Load(), out.Load()
	res.MaxInFlight = maxInflight.Load()
	res.Errors = errs.snapshot()
	return res, nil
}

// RPCClientConfig configures the rpc client: Callers concurrent callers,
// each looping "send request, wait for its response", spread round-robin
// over Conns connections.
type RPCClientConfig struct {
	Addr        string
	Conns       int // M, default 1
	Callers     int // N, default 1
	ReqSize     int // bytes, default 16384
	RespFactor  float64
	Duration    time.Duration // run time; 0 with Count > 0: until Count is done
	Count       int64         // total requests, 0: unlimited
	Buffers     Buffers
	DialTimeout time.Duration // default 5 s
}

// RPCClientResult is what the rpc client measured.
type RPCClientResult struct {
	Conns          int            `json:"conns"`
	Callers        int            `json:"callers"`
	ReqSize        int            `json:"req_size"`
	RespSize       int            `json:"resp_size"`
	Seconds        float64        `json:"seconds"`
	Requests       int64          `json:"requests"`
	Latency        Latency        `json:"latency"`
	RequestsPerSec float64        `json:"requests_per_sec"`
	BytesPerSec    float64        `json:"bytes_per_sec"` // requests and responses, headers included
	Errors         map[string]int `json:"errors,omitempty"`
	ConnInfo       []*ConnInfo    `json:"conn_info,omitempty"` // per connection, at the end
}

type rpcConn struct {
	c       net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint64]chan struct{}
	done    chan struct{} // closed when the reader stops
}

func (rc *rpcConn) read() {
	defer close(rc.done)
	br := bufio.NewReaderSize(rc.c, 64<<10)
	hdr := make([]byte, rpcRespHeader)
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[0:])
		id := binary.BigEndian.Uint64(hdr[4:])
		if n > rpcMaxFrame {
			return
		}
		if _, err := br.Discard(int(n)); err != nil {
			return
		}
		rc.mu.Lock()
		ch := rc.pending[id]
		delete(rc.pending, id)
		rc.mu.Unlock()
		if ch != nil {
			ch <- struct{}{}
		}
	}
}

// RunRPCClient runs the rpc client until cfg.Duration passes, Count
// requests are done, or ctx is done.
func RunRPCClient(ctx context.Context, cfg RPCClientConfig) (RPCClientResult, error) {
	if cfg.Conns == 0 {
		cfg.Conns = 1
	}
	if cfg.Callers == 0 {
		cfg.Callers = 1
	}
	if cfg.ReqSize == 0 {
		cfg.ReqSize = 16 << 10
	}
	if cfg.RespFactor == 0 {
		cfg.RespFactor = 2
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	respSize := int(float64(cfg.ReqSize) * cfg.RespFactor)
	switch {
	case cfg.Conns < 0 || cfg.Callers < 0 || cfg.Count < 0:
		return RPCClientResult{}, fmt.Errorf("traffic: rpc: negative conns, callers or count")
	case cfg.ReqSize < 0 || cfg.ReqSize > rpcMaxFrame || cfg.RespFactor < 0 || respSize > rpcMaxFrame:
		return RPCClientResult{}, fmt.Errorf("traffic: rpc: request %d x factor %g out of range", cfg.ReqSize, cfg.RespFactor)
	case cfg.Duration <= 0 && cfg.Count == 0:
		return RPCClientResult{}, fmt.Errorf("traffic: rpc: need a duration or a count")
	}
	if err := cfg.Buffers.validate(); err != nil {
		return RPCClientResult{}, fmt.Errorf("traffic: rpc: %w", err)
	}
	ctx, cancel := runCtx(ctx, cfg.Duration)
	defer cancel()

	d := cfg.Buffers.dialer(cfg.DialTimeout)
	conns := make([]*rpcConn, 0, cfg.Conns)
	defer func() {
		for _, rc := range conns {
			rc.c.Close()
		}
	}()
	for range cfg.Conns {
		c, err := d.DialContext(ctx, "tcp", cfg.Addr)
		if err != nil {
			return RPCClientResult{}, fmt.Errorf("traffic: rpc: dial %s: %w", cfg.Addr, err)
		}
		rc := &rpcConn{c: c, pending: map[uint64]chan struct{}{}, done: make(chan struct{})}
		conns = append(conns, rc)
		go rc.read()
	}
	// At the end, unblock readers and writers but keep the sockets open
	// for their TCP_INFO.
	stop := context.AfterFunc(ctx, func() {
		for _, rc := range conns {
			rc.c.SetDeadline(time.Now())
		}
	})
	defer stop()

	var ids, started atomic.Int64
	var errs counts
	lat := make([][]time.Duration, cfg.Callers)
	chunk := zeros(min(cfg.ReqSize, 256<<10) + 1)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Callers {
		rc := conns[i%len(conns)]
		wg.Go(func() {
			ch := make(chan struct{}, 1)
			hdr := make([]byte, rpcReqHeader)
			for ctx.Err() == nil {
				if cfg.Count > 0 && started.Add(1) > cfg.Count {
					return
				}
				id := uint64(ids.Add(1))
				binary.BigEndian.PutUint32(hdr[0:], uint32(cfg.ReqSize))
				binary.BigEndian.PutUint32(hdr[4:], uint32(respSize))
				binary.BigEndian.PutUint64(hdr[8:], id)
				rc.mu.Lock()
				rc.pending[id] = ch
				rc.mu.Unlock()
				t0 := time.Now()
				bufs := append(net.Buffers{hdr}, payload(chunk, cfg.ReqSize)...)
				rc.wmu.Lock()
				_, err := bufs.WriteTo(rc.c)
				rc.wmu.Unlock()
				if err != nil {
					errs.addErr(ctx, err)
					return
				}
				select {
				case <-ch:
					lat[i] = append(lat[i], time.Since(t0))
				case <-rc.done:
					if ctx.Err() == nil {
						errs.add("EOF")
					}
					return
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := RPCClientResult{
		Conns: cfg.Conns, Callers: cfg.Callers, ReqSize: cfg.ReqSize, RespSize: respSize,
		Seconds: elapsed.Seconds(),
	}
	for _, rc := range conns {
		res.ConnInfo = append(res.ConnInfo, connInfo(rc.c))
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	res.Latency = summarize(all)
	res.Requests = int64(len(all))
	if elapsed > 0 {
		res.RequestsPerSec = float64(res.Requests) / elapsed.Seconds()
		res.BytesPerSec = float64(res.Requests) * float64(cfg.ReqSize+respSize+rpcReqHeader+rpcRespHeader) / elapsed.Seconds()
	}
	res.Errors = errs.snapshot()
	return res, nil
}

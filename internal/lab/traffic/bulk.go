// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// bulk protocol: the client sends u64 size and u8 direction. Up: the
// client sends size bytes and the server answers one byte once it has read
// them all. Down: the server sends size bytes.
const bulkHeader = 9

// Direction of a bulk transfer.
const (
	Up   = "up"   // client sends to server
	Down = "down" // server sends to client
)

// BulkServerConfig configures the bulk server.
type BulkServerConfig struct {
	Addr      string
	Backlog   int
	Buffers   Buffers
	ReadSize  int           // bytes per read when receiving, default 64 KiB
	ReadDelay time.Duration // sleep after each read: a slow reader
	Count     int           // stop after this many transfers, 0: no limit
	Duration  time.Duration // 0: until ctx is done (or Count)
	Ready     func(addr string)
}

// Transfer is one bulk transfer as one side saw it. Seconds runs from the
// first byte written or the request sent to the last byte read or the
// receiver's acknowledgement.
type Transfer struct {
	Direction string    `json:"direction"`
	Bytes     int64     `json:"bytes"`
	Seconds   float64   `json:"seconds"`
	Mbps      float64   `json:"mbps"`
	Error     string    `json:"error,omitempty"`
	ConnInfo  *ConnInfo `json:"conn_info,omitempty"` // this side, at the end
	// Local is the client's address of the connection ("ip:port"), so
	// a trace of the server's port can tell its transfer from an
	// earlier connection's still closing; empty on the server's side.
	Local string `json:"local,omitempty"`
}

// BulkServerResult lists the transfers the server took part in.
type BulkServerResult struct {
	Addr      string     `json:"addr"`
	Conns     int        `json:"conns"`
	Transfers []Transfer `json:"transfers"`
}

// BulkClientConfig configures one bulk transfer.
type BulkClientConfig struct {
	Addr        string
	Size        int64
	Direction   string // Up (default) or Down
	Buffers     Buffers
	ReadSize    int
	ReadDelay   time.Duration
	DialTimeout time.Duration // default 5 s
	// StartDelay: wait this long after connecting before the transfer
	// (not part of its time), so that a tracer finds the connection
	// before it moves data.
	StartDelay time.Duration
}

// BulkClientResult is the client's view of the transfer.
type BulkClientResult struct {
	Transfer
	Buffers Buffers `json:"buffers"` // as asked
}

// RunBulkServer serves bulk transfers until ctx is done, cfg.Duration
// passes or cfg.Count transfers are done.
func RunBulkServer(ctx context.Context, cfg BulkServerConfig) (BulkServerResult, error) {
	if cfg.Count < 0 || cfg.ReadSize < 0 {
		return BulkServerResult{}, fmt.Errorf("traffic: bulk: negative count or read size")
	}
	ctx, cancel, ln, err := startListening(ctx, cfg.Duration, cfg.Addr, cfg.Backlog, cfg.Buffers, cfg.Ready)
	if err != nil {
		return BulkServerResult{}, fmt.Errorf("traffic: bulk: %w", err)
	}
	defer cancel()
	res := BulkServerResult{Addr: ln.Addr().String(), Transfers: []Transfer{}}
	var mu sync.Mutex
	chunk := zeros(256 << 10)
	res.Conns, _ = serveConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		hdr := make([]byte, bulkHeader)
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		size := int64(binary.BigEndian.Uint64(hdr))
		tr := Transfer{Bytes: size}
		t0 := time.Now()
		var err error
		switch hdr[8] {
		case 'u':
			tr.Direction = Up
			var n int64
			n, err = receive(ctx, c, size, cfg.ReadSize, cfg.ReadDelay)
			tr.Bytes = n
			if err == nil {
				_, err = c.Write([]byte{1})
			}
		case 'd':
			tr.Direction = Down
			err = send(c, chunk, size)
			if err == nil {
				// Wait for the client's close so Seconds covers delivery.
				_, _ = c.Read(hdr[:1])
			}
		default:
			return
		}
		d := time.Since(t0)
		tr.Seconds, tr.Mbps = d.Seconds(), mbps(tr.Bytes, d)
		if err != nil {
			tr.Error = ErrnoName(err)
		}
		tr.ConnInfo = connInfo(c)
		mu.Lock()
		res.Transfers = append(res.Transfers, tr)
		done := cfg.Count > 0 && len(res.Transfers) >= cfg.Count
		mu.Unlock()
		if done {
			cancel()
		}
	})
	return res, nil
}

// send writes size bytes from chunk.
func send(c net.Conn, chunk []byte, size int64) error {
	for size > 0 {
		k := min(size, int64(len(chunk)))
		n, err := c.Write(chunk[:k])
		size -= int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// receive reads exactly size bytes, readSize at a time, sleeping delay
// after each read.
func receive(ctx context.Context, c net.Conn, size int64, readSize int, delay time.Duration) (int64, error) {
	if readSize <= 0 {
		readSize = 64 << 10
	}
	buf := make([]byte, readSize)
	var got int64
	for got < size {
		n, err := c.Read(buf[:min(int64(readSize), size-got)])
		got += int64(n)
		if err != nil {
			return got, err
		}
		if delay > 0 && !sleepCtx(ctx, delay) {
			return got, ctx.Err()
		}
	}
	return got, nil
}

// RunBulkClient runs one transfer.
func RunBulkClient(ctx context.Context, cfg BulkClientConfig) (BulkClientResult, error) {
	if cfg.Direction == "" {
		cfg.Direction = Up
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Size < 0 || cfg.ReadSize < 0 || (cfg.Direction != Up && cfg.Direction != Down) {
		return BulkClientResult{}, fmt.Errorf("traffic: bulk: bad size %d, read size %d or direction %q", cfg.Size, cfg.ReadSize, cfg.Direction)
	}
	if err := cfg.Buffers.validate(); err != nil {
		return BulkClientResult{}, fmt.Errorf("traffic: bulk: %w", err)
	}
	c, err := cfg.Buffers.dialer(cfg.DialTimeout).DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return BulkClientResult{}, fmt.Errorf("traffic: bulk: dial %s: %w", cfg.Addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()

	hdr := make([]byte, bulkHeader)
	binary.BigEndian.PutUint64(hdr, uint64(cfg.Size))
	hdr[8] = cfg.Direction[0]
	res := BulkClientResult{Transfer: Transfer{Direction: cfg.Direction, Local: c.LocalAddr().String()}, Buffers: cfg.Buffers}
	if cfg.StartDelay > 0 {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("traffic: bulk: %w", ctx.Err())
		case <-time.After(cfg.StartDelay):
		}
	}
	t0 := time.Now()
	if _, err = c.Write(hdr); err == nil {
		if cfg.Direction == Up {
			if err = send(c, zeros(256<<10), cfg.Size); err == nil {
				res.Bytes = cfg.Size
				_, err = io.ReadFull(c, hdr[:1])
			}
		} else {
			res.Bytes, err = receive(ctx, c, cfg.Size, cfg.ReadSize, cfg.ReadDelay)
		}
	}
	d := time.Since(t0)
	res.Seconds, res.Mbps = d.Seconds(), mbps(res.Bytes, d)
	res.ConnInfo = connInfo(c)
	if err != nil {
		return res, fmt.Errorf("traffic: bulk: %s after %d bytes: %w", cfg.Direction, res.Bytes, err)
	}
	return res, nil
}

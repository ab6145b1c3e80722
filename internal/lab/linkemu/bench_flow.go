// SPDX-License-Identifier: Apache-2.0

// The bench's throughput run: one bulk TCP flow through the link.

package linkemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
)

// benchFlow starts a link with p and runs one TCP flow, client to server,
// for o.Duration.
func benchFlow(ctx context.Context, t *topo.Topo, o BenchOptions, p Params) (FlowResult, error) {
	res := FlowResult{RTT: p.RTT, Rate: p.RateUp}
	l, err := Start(t, p)
	if err != nil {
		return res, err
	}
	defer l.Close()
	var ln *net.TCPListener
	if err := t.Do(t.Server, func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{Port: benchPort})
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench listen: %w", err)
	}
	defer ln.Close()
	type recv struct {
		n, atOne int64 // bytes in all, and after one second
		elapsed  time.Duration
		err      error
	}
	rc := make(chan recv, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rc <- recv{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		var r recv
		b := make([]byte, 256<<10)
		for {
			k, err := c.Read(b)
			r.n += int64(k)
			if r.atOne == 0 && time.Since(start) >= time.Second {
				r.atOne = r.n
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				break
			}
		}
		r.elapsed = time.Since(start)
		rc <- r
	}()
	var c net.Conn
	if err := t.Do(t.Client, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(t.ServerAddrs[0].String(), fmt.Sprint(benchPort)), 5*time.Second)
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench connect: %w", err)
	}
	before := l.Stats()
	var once sync.Once
	stop := func() { once.Do(func() { c.Close() }) }
	defer stop()
	deadline := time.Now().Add(o.Duration)
	c.SetWriteDeadline(deadline)
	buf := make([]byte, 128<<10)
	cancelled := context.AfterFunc(ctx, stop)
	defer cancelled()
	for time.Now().Before(deadline) {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	// Close sends FIN after the data still buffered; the receiver's EOF
	// ends its clock.
	c.(*net.TCPConn).CloseWrite()
	var r recv
	select {
	case r = <-rc:
	case <-time.After(10 * time.Second):
		return res, errors.New("linkemu: bench flow: receiver did not finish")
	}
	stop()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if r.err != nil {
		return res, fmt.Errorf("linkemu: bench flow: %w", r.err)
	}
	after := l.Stats()
	res.Bytes, res.Elapsed = r.n, r.elapsed
	if r.elapsed > 0 {
		res.Mbps = float64(r.n) * 8 / r.elapsed.Seconds() / 1e6
		if r.elapsed >= 2*time.Second && r.atOne > 0 {
			res.SteadyMbps = float64(r.n-r.atOne) * 8 / (r.elapsed - time.Second).Seconds() / 1e6
		}
		res.CPU = after.CPU - before.CPU
		res.CPUPct = 100 * res.CPU.Seconds() / r.elapsed.Seconds()
	}
	res.Link = after
	return res, l.Close()
}

// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestConnectionBottleneck is case C1: 100 callers multiplex 16K requests
// (32K responses) onto one connection with both ends pinned at 32K,
// through a 20 ms, 200 Mbit/s link. The connection is busy all the time
// and held back by small buffers and windows; the rule recommends more
// connections. The same callers over 8 autotuned connections are quiet.
//
// The finding is asserted on the provider's end. On the caller's end the
// requests are gated by the slow responses (a closed loop): in trials it
// was busy 100 % but the kernel put only 18 % of that on rwnd+sndbuf and
// its Send-Q swung between 16K and 35K, so the rule did not report it.
func TestConnectionBottleneck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int
		buf   int
	}{{"one32K", 1, 32 << 10}, {"eight-autotuned", 8, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 200e6, RateDown: 200e6})
			bufs := traffic.Buffers{SndBuf: tc.buf, RcvBuf: tc.buf}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			ready := make(chan string, 1)
			run := func(ns netns.NS, fn func() error) {
				wg.Go(func() {
					if err := netns.Do(ns, fn); err != nil && ctx.Err() == nil {
						t.Errorf("%s: %v", ns.Name, err)
					}
				})
			}
			run(p.server, func() error {
				_, err := traffic.RunRPCServer(ctx, traffic.RPCServerConfig{
					Addr: netip.AddrPortFrom(p.srv, 0).String(), Buffers: bufs, ThinkMax: time.Millisecond,
					Duration: 20 * time.Second, Ready: func(a string) { ready <- a }})
				return err
			})
			var addr string
			select {
			case addr = <-ready:
			case <-time.After(5 * time.Second):
				t.Fatal("rpc server not ready")
			}
			run(p.client, func() error {
				_, err := traffic.RunRPCClient(ctx, traffic.RPCClientConfig{
					Addr: addr, Conns: tc.conns, Callers: 100, ReqSize: 16 << 10, Buffers: bufs, Duration: 20 * time.Second})
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			})
			time.Sleep(time.Second)
			// The provider's end carries the responses (twice the bytes)
			// and is where the kernel sees the consumer's small window.
			r, b, prev, cur := sample(t, p.server, 1500*time.Millisecond)
			srv := netip.MustParseAddrPort(addr)
			// Every provider connection has the same local address: sum
			// bytes_acked deltas by socket cookie.
			was := map[uint64]uint64{}
			var tb snapshot.TCPInfo
			for _, sk := range prev.Sockets {
				if ti := sk.TCP(&tb); ti != nil {
					was[sk.Cookie] = ti.BytesAcked
				}
			}
			var total float64
			for _, sk := range cur.Sockets {
				if w, ok := was[sk.Cookie]; ok && sk.Local.AddrPort() == srv {
					if ti := sk.TCP(&tb); ti != nil && ti.BytesAcked >= w {
						total += float64(ti.BytesAcked-w) * 8 / 1e6 / cur.Taken.Sub(prev.Taken).Seconds()
					}
				}
			}
			t.Logf("%d connection(s) carried %.1f Mbit/s of responses", tc.conns, total)
			if total < 5 {
				t.Fatalf("responses moved %.1f Mbit/s: too little load to judge", total)
			}
			fs := r.Find("connection-bottleneck", diag.Info)
			if tc.conns > 1 {
				// Quiet on both ends.
				cr, cb, _, _ := sample(t, p.client, 1500*time.Millisecond)
				for _, f := range append(fs, cr.Find("connection-bottleneck", diag.Info)...) {
					logFinding(t, f)
					t.Errorf("a pool of %d autotuned connections reported:\n%s\n%s", tc.conns, b, cb)
				}
				return
			}
			f := one(t, r, b, "connection-bottleneck")
			for _, e := range f.Evidence {
				t.Logf("  %s = %s", e.Name, e.Value)
			}
			// Server side: the peer is the caller's address (its ports are
			// one per connection), the service the listener.
			if f.Subject.Local.String() != addr || f.Subject.Service.String() != addr || f.Subject.Remote.String() != p.cli.String() || f.Subject.Pid != os.Getpid() {
				t.Errorf("subject %+v, want the provider's connection %s to the caller at %s, pid %d", f.Subject, addr, p.cli, os.Getpid())
			}
			n := 0
			if m := regexp.MustCompile(`use about (\d+)$`).FindStringSubmatch(f.Summary); m != nil {
				n, _ = strconv.Atoi(m[1])
			}
			if n < 4 {
				t.Errorf("summary %q: want a recommendation of at least 4 connections", f.Summary)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"testing"
	"time"
)

func TestRPCConnections(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (RPCServerResult, error) {
		return RunRPCServer(ctx, RPCServerConfig{
			Addr: "127.0.0.1:0", Buffers: Buffers{SndBuf: 4096, RcvBuf: 4096},
			ThinkMin: time.Millisecond, ThinkMax: 5 * time.Millisecond, Ready: ready,
		})
	})
	var total int64
	for _, m := range []int{1, 4} {
		res, err := RunRPCClient(context.Background(), RPCClientConfig{
			Addr: addr, Conns: m, Callers: 16, ReqSize: 16 << 10, RespFactor: 2,
			Duration: 500 * time.Millisecond, Buffers: Buffers{SndBuf: 4096, RcvBuf: 4096},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("M=%d: %d requests, p50 %.1f ms p99 %.1f ms, %.0f req/s", m, res.Requests, res.Latency.P50Ms, res.Latency.P99Ms, res.RequestsPerSec)
		if res.Requests < 50 || len(res.Errors) > 0 {
			t.Errorf("M=%d: %d requests, errors %v", m, res.Requests, res.Errors)
		}
		if res.Latency.P50Ms < 1 || res.Latency.P99Ms < res.Latency.P50Ms {
			t.Errorf("M=%d: latency %+v below the 1 ms think time or unordered", m, res.Latency)
		}
		if len(res.ConnInfo) != m || res.ConnInfo[0] == nil || res.ConnInfo[0].SndBuf != 8192 {
			t.Errorf("M=%d: conn info %+v, want %d with pinned sndbuf 8192", m, res.ConnInfo, m)
		}
		total += res.Requests
	}
	srv := stop()
	if srv.Conns != 5 || srv.Requests < total {
		t.Errorf("server: %+v, want 5 conns and at least %d requests", srv, total)
	}
}

func TestRPCCount(t *testing.T) {
	addr, _ := startServer(t, func(ctx context.Context, ready func(string)) (RPCServerResult, error) {
		return RunRPCServer(ctx, RPCServerConfig{Addr: "127.0.0.1:0", Ready: ready})
	})
	res, err := RunRPCClient(context.Background(), RPCClientConfig{Addr: addr, Conns: 2, Callers: 3, ReqSize: 100, Count: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 10 || res.RespSize != 200 {
		t.Errorf("got %d requests of response %d, want 10 of 200", res.Requests, res.RespSize)
	}
	if _, err := RunRPCClient(context.Background(), RPCClientConfig{Addr: addr, Count: 1, Conns: -1}); err == nil {
		t.Error("negative conns accepted")
	}
}

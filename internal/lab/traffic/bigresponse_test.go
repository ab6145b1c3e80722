// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"context"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

func TestBigResponse(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (BigServerResult, error) {
		return RunBigServer(ctx, BigServerConfig{Addr: "127.0.0.1:0", Ready: ready})
	})
	res, err := RunBigClient(context.Background(), BigClientConfig{
		Addr: addr, Requests: 3, LinkRate: 100e6, Buffers: Buffers{RcvBuf: 128 << 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3.4 MB with rcvbuf 128K: mean %.2f ms (transfer %.2f), ideal %.0f ms", res.MeanTotalMs, res.MeanTransfer, res.IdealMs)
	if len(res.Requests) != 3 {
		t.Fatalf("%d requests, want 3", len(res.Requests))
	}
	var prev time.Time
	for _, r := range res.Requests {
		if r.Bytes != 3_400_000 || r.TransferMs > r.TotalMs || r.TotalMs <= 0 {
			t.Errorf("request %+v, want 3400000 bytes and transfer <= total", r)
		}
		// Its wall-clock edges, in order, TotalMs apart.
		if d := ms(r.End.Sub(r.Start)); r.Start.Before(prev) || math.Abs(d-r.TotalMs) > 1e-6 {
			t.Errorf("request %+v: %.3f ms from start to end, want %.3f after the one before", r, d, r.TotalMs)
		}
		prev = r.End
	}
	if math.Abs(res.IdealMs-272) > 1e-9 || res.TotalRatio <= 0 {
		t.Errorf("ideal %.3f ms (want 272), ratio %.3f", res.IdealMs, res.TotalRatio)
	}
	if res.ConnInfo == nil || res.ConnInfo.RcvBuf != 256<<10 {
		t.Errorf("conn info %+v, want rcvbuf read back 256K", res.ConnInfo)
	}
	// An explicit size on the same server.
	res, err = RunBigClient(context.Background(), BigClientConfig{Addr: addr, Size: 12345})
	if err != nil || len(res.Requests) != 1 || res.Requests[0].Bytes != 12345 || res.IdealMs != 0 {
		t.Errorf("size 12345: %+v, %v", res, err)
	}
	srv := stop()
	if srv.Conns != 2 || len(srv.Responses) != 4 || srv.Responses[3].Bytes != 12345 || srv.Responses[0].ConnInfo == nil {
		t.Errorf("server: %+v", srv)
	}
}

func TestBigResponseBadRequest(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (BigServerResult, error) {
		return RunBigServer(ctx, BigServerConfig{Addr: "127.0.0.1:0", Ready: ready})
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /bytes/-5 HTTP/1.1\r\n\r\n")
	status, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(status, "400") {
		t.Errorf("status %q, want 400", status)
	}
	if srv := stop(); len(srv.Responses) != 0 || len(srv.Errors) != 1 {
		t.Errorf("server: %+v", srv)
	}
}

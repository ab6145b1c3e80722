// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// timeWait counts TIME_WAIT sockets in /proc/net/tcp whose remote (or, with
// local, local) port is port.
func timeWait(t *testing.T, port int, local bool) int {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "06" {
			continue
		}
		addr := fs[2]
		if local {
			addr = fs[1]
		}
		_, hex, _ := strings.Cut(addr, ":")
		if p, err := strconv.ParseUint(hex, 16, 16); err == nil && int(p) == port {
			n++
		}
	}
	return n
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func churnServer(t *testing.T) (string, func() ChurnServerResult) {
	return startServer(t, func(ctx context.Context, ready func(string)) (ChurnServerResult, error) {
		return RunChurnServer(ctx, ChurnServerConfig{Addr: "127.0.0.1:0", Ready: ready})
	})
}

func TestChurnShortLeavesTimeWait(t *testing.T) {
	addr, stop := churnServer(t)
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr, Count: 300, Concurrency: 8, RespSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tw := timeWait(t, portOf(t, addr), false)
	t.Logf("short: %d ok, %d new conns, %d TIME_WAIT, %.0f/s", res.OK, res.NewConns, tw, res.OKPerSec)
	if res.Mode != ModeShort || res.OK != 300 || res.Failed != 0 || res.NewConns != 300 {
		t.Errorf("got %+v, want 300 requests on 300 connections", res)
	}
	// The client closes first: its side holds TIME_WAIT (a few ports may be
	// reused on loopback, where tcp_tw_reuse=2 applies).
	if tw < 250 {
		t.Errorf("%d client TIME_WAIT sockets to %s, want about 300", tw, addr)
	}
	if srv := stop(); srv.Conns != 300 || srv.Requests != 300 {
		t.Errorf("server: %+v", srv)
	}
	if len(res.PerSecond) == 0 || res.PerSecond[0].OK == 0 {
		t.Errorf("per-second series %+v", res.PerSecond)
	}
}

func TestChurnPoolAndLinger(t *testing.T) {
	addr, _ := churnServer(t)
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr, Count: 300, Pool: 4, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModePool || res.OK != 300 || res.NewConns != 4 {
		t.Errorf("got %+v, want 300 requests over 4 connections", res)
	}
	// Only the pooled connections, closed at the end, can be in TIME_WAIT.
	if tw := timeWait(t, portOf(t, addr), false); tw > 4 {
		t.Errorf("pool mode left %d TIME_WAIT, want at most 4", tw)
	}

	addr2, _ := churnServer(t)
	res, err = RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr2, Count: 50, Linger0: true})
	if err != nil || res.OK != 50 {
		t.Fatalf("linger0: %+v, %v", res, err)
	}
	if tw := timeWait(t, portOf(t, addr2), false); tw != 0 {
		t.Errorf("SO_LINGER 0 left %d TIME_WAIT, want 0", tw)
	}
}

func TestChurnThroughProxy(t *testing.T) {
	b1, stop1 := churnServer(t)
	b2, stop2 := churnServer(t)
	paddr, pstop := startServer(t, func(ctx context.Context, ready func(string)) (ProxyResult, error) {
		return RunProxy(ctx, ProxyConfig{Addr: "127.0.0.1:0", Backends: []string{b1, b2}, Ready: ready})
	})
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: paddr, Count: 40, Rate: 400, RespSize: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 40 {
		t.Errorf("through proxy: %+v, want 40 ok", res)
	}
	if tw := timeWait(t, portOf(t, paddr), false); tw < 30 {
		t.Errorf("client holds %d TIME_WAIT to the proxy, want about 40", tw)
	}
	// The proxy closes upstream first: it holds TIME_WAIT to the backends.
	if tw := timeWait(t, portOf(t, b1), false) + timeWait(t, portOf(t, b2), false); tw < 30 {
		t.Errorf("proxy holds %d TIME_WAIT to the backends, want about 40", tw)
	}
	p := pstop()
	if p.Accepted != 40 || p.UpstreamOK != 40 || p.PerBackend[b1] != 20 || p.PerBackend[b2] != 20 || p.BytesDown != 40*5000 {
		t.Errorf("proxy: %+v", p)
	}
	if s1, s2 := stop1(), stop2(); s1.Requests+s2.Requests != 40 {
		t.Errorf("backends served %d + %d, want 40", s1.Requests, s2.Requests)
	}
}

func TestProxyUpstreamRefused(t *testing.T) {
	// A port with no listener: bind one, note it, close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	paddr, pstop := startServer(t, func(ctx context.Context, ready func(string)) (ProxyResult, error) {
		return RunProxy(ctx, ProxyConfig{Addr: "127.0.0.1:0", Backends: []string{dead}, Ready: ready})
	})
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: paddr, Count: 5, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The proxy closes the client's connection (EOF, or RST if the request
	// was unread).
	if res.OK != 0 || res.Errors["EOF"]+res.Errors["ECONNRESET"] != 5 {
		t.Errorf("client: %+v, want 5 EOF or ECONNRESET failures", res)
	}
	if p := pstop(); p.UpstreamFailed != 5 || p.UpstreamErrors["ECONNREFUSED"] != 5 {
		t.Errorf("proxy: %+v, want 5 ECONNREFUSED", p)
	}
}

func TestChurnHold(t *testing.T) {
	addr, stop := churnServer(t)
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr, Hold: 30, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModeHold || res.Held != 30 || res.OK != 30 || res.Seconds < 0.3 {
		t.Errorf("hold: %+v", res)
	}
	if srv := stop(); srv.MaxOpen != 30 {
		t.Errorf("server saw at most %d open, want 30", srv.MaxOpen)
	}
	if _, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr}); err == nil {
		t.Error("unbounded run accepted")
	}
}

// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPortExhaustionInNetns narrows ip_local_port_range to 50 ports in a
// namespace of its own and re-runs itself there: holding 60 connections to
// one ip:port must fail with EADDRNOTAVAIL, directly and at a proxy.
func TestPortExhaustionInNetns(t *testing.T) {
	if os.Getenv("TDWL_IN_NETNS") == "1" {
		portExhaustion(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2:", err)
	}
	ns := fmt.Sprintf("tdlab-wltest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	for _, args := range [][]string{
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40049"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestPortExhaustionInNetns$", "-test.v")
	cmd.Env = append(os.Environ(), "TDWL_IN_NETNS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in %s:\n%s", ns, out)
	if err != nil {
		t.Fatal(err)
	}
}

// churnServerAt listens on a fixed port: in the narrowed namespace port 0
// would take one of the 50 ephemeral ports.
func churnServerAt(t *testing.T, addr string) string {
	a, _ := startServer(t, func(ctx context.Context, ready func(string)) (ChurnServerResult, error) {
		return RunChurnServer(ctx, ChurnServerConfig{Addr: addr, Ready: ready})
	})
	return a
}

func portExhaustion(t *testing.T) {
	addr := churnServerAt(t, "127.0.0.1:7001")
	res, err := RunChurnClient(context.Background(), ChurnClientConfig{Addr: addr, Hold: 60, Concurrency: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("direct: held %d, errors %v", res.Held, res.Errors)
	if res.Held != 50 || res.Errors["EADDRNOTAVAIL"] != 10 {
		t.Errorf("direct: held %d, errors %v; want 50 held and 10 EADDRNOTAVAIL", res.Held, res.Errors)
	}

	backend := churnServerAt(t, "127.0.0.1:7002")
	paddr, pstop := startServer(t, func(ctx context.Context, ready func(string)) (ProxyResult, error) {
		return RunProxy(ctx, ProxyConfig{Addr: "0.0.0.0:7003", Backends: []string{backend}, Ready: ready})
	})
	// Clients reach the proxy at two addresses (each 4-tuple set has its
	// own 50 ports); the proxy's 55 upstream connections share one.
	_, port, _ := net.SplitHostPort(paddr)
	held := make(chan int, 2)
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		go func() {
			r, err := RunChurnClient(context.Background(), ChurnClientConfig{
				Addr: net.JoinHostPort(ip, port), Hold: 30, Concurrency: 1, Duration: 400 * time.Millisecond,
			})
			if err != nil {
				t.Error(err)
			}
			held <- r.Held
		}()
	}
	h := <-held + <-held
	p := pstop()
	t.Logf("through proxy: clients held %d; proxy upstream ok %d, errors %v", h, p.UpstreamOK, p.UpstreamErrors)
	if h != 60 {
		t.Errorf("clients held %d connections to the proxy, want 60", h)
	}
	if p.UpstreamOK != 50 || p.UpstreamErrors["EADDRNOTAVAIL"] != 10 {
		t.Errorf("proxy: %+v; want 50 upstream and 10 EADDRNOTAVAIL", p)
	}
}

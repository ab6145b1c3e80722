// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func logFinding(t *testing.T, f diag.Finding) {
	t.Helper()
	t.Logf("%s %s %+v: %s", f.Severity, f.Rule, f.Subject, f.Summary)
}

// one returns the single finding of rule at warning or above, failing
// with the JSON otherwise.
func one(t *testing.T, r Report, b []byte, rule string) diag.Finding {
	t.Helper()
	fs := r.Find(rule, diag.Warning)
	if len(fs) != 1 {
		t.Fatalf("%s: %d findings at warning or above, want 1:\n%s", rule, len(fs), b)
	}
	logFinding(t, fs[0])
	return fs[0]
}

// TestListenOverflowCLI: a backlog-8 listener that never accepts, hit by
// 200 connects, diagnosed through the real command line (check --netns
// NAME --interval 1s --json): exit code 1 and the listener named. The
// dropped handshakes retransmit their SYNs (1 s, 3 s), so the counters
// keep moving inside the CLI's window.
func TestListenOverflowCLI(t *testing.T) {
	ns := testns.New(t, "lo")
	var ln netip.AddrPort
	In(t, ns, func() error {
		_, a, err := Listen(t, 8, nil)
		ln = a
		return err
	})
	// The burst lands inside the CLI's window: 300 ms after it starts.
	burst := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		burst <- netns.Do(ns, func() error {
			for i := 0; i < 200; i++ {
				fd, err := DialNB(ln)
				if err != nil {
					return err
				}
				Close(t, fd)
			}
			return nil
		})
	}()
	var out, errb bytes.Buffer
	env := cli.DefaultEnv()
	env.Stdout, env.Stderr, env.IsTTY = &out, &errb, false
	code := cli.Main([]string{"check", "--netns", ns.Name, "--interval", "1s", "--json"}, env)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	if err := <-burst; err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	f := one(t, r, out.Bytes(), "listen-overflow")
	if f.Subject.Local.String() != ln.String() || f.Subject.Pid != os.Getpid() || f.Subject.Netns != ns.Name {
		t.Errorf("subject %+v, want %s pid %d in %s", f.Subject, ln, os.Getpid(), ns.Name)
	}
	t.Logf("evidence: queue %q, overflows %q", Evidence(f, "accept queue (Recv-Q)"), Evidence(f, "ListenOverflows"))
	if !strings.Contains(f.Summary, "overflowed its accept queue") {
		t.Errorf("summary %q: want counted overflows in the window", f.Summary)
	}
}

// TestPortExhaustion: range narrowed to 100 ports, connections to one
// ip:port held open until connect() fails with EADDRNOTAVAIL.
func TestPortExhaustion(t *testing.T) {
	ns := testns.New(t, "pe")
	Sysctl(t, ns, "net.ipv4.ip_local_port_range=40000 40099")
	var ln netip.AddrPort
	var n int
	var lastErr error
	In(t, ns, func() error {
		_, a, err := Listen(t, 4096, nil)
		if err != nil {
			return err
		}
		ln = a
		for i := 0; i < 200; i++ {
			fd, err := Dial(a, nil)
			if err != nil {
				lastErr = err
				break
			}
			Close(t, fd)
			n++
		}
		return nil
	})
	if !errors.Is(lastErr, unix.EADDRNOTAVAIL) {
		t.Fatalf("after %d connects: %v, want EADDRNOTAVAIL", n, lastErr)
	}
	t.Logf("%d connects to %s, then EADDRNOTAVAIL", n, ln)
	r, b, _ := Sample(t, ns, time.Second, nil)
	f := one(t, r, b, "port-exhaustion")
	if f.Severity != diag.Critical || f.Subject.Remote.String() != ln.String() || f.Subject.Pid != os.Getpid() {
		t.Errorf("finding %v %+v, want critical, remote %s, pid %d", f.Severity, f.Subject, ln, os.Getpid())
	}
	t.Logf("evidence: %s", Evidence(f, "ephemeral ports in use to this destination"))
}

// TestTimeWaitChurn: 700 short connections to one ip:port, closed by the
// client first, in a range of 1000 ports.
func TestTimeWaitChurn(t *testing.T) {
	ns := testns.New(t, "tw")
	// tcp_tw_reuse=0: each TIME_WAIT holds its port for 60 s even towards
	// loopback (with the default 2 the kernel reuses them after 1 s, and
	// the rule rightly stays quiet: the corpus covers that case).
	Sysctl(t, ns, "net.ipv4.ip_local_port_range=40000 40999", "net.ipv4.tcp_tw_reuse=0")
	var ln netip.AddrPort
	var lfd int
	In(t, ns, func() error {
		var err error
		lfd, ln, err = Listen(t, 4096, nil)
		return err
	})
	r, b, _ := Sample(t, ns, 1500*time.Millisecond, func() {
		In(t, ns, func() error {
			for i := 0; i < 700; i++ {
				c, err := Dial(ln, nil)
				if err != nil {
					return fmt.Errorf("connect %d: %w", i, err)
				}
				s, err := Accept(lfd)
				if err != nil {
					unix.Close(c)
					return err
				}
				unix.Close(c) // client first: TIME_WAIT on the client side
				unix.Close(s)
			}
			return nil
		})
	})
	f := one(t, r, b, "time-wait-churn")
	// TIME_WAIT sockets belong to no process: the rule can name the
	// destination, not the pid, once the connections are closed.
	if f.Subject.Remote.String() != ln.String() {
		t.Errorf("subject %+v, want remote %s", f.Subject, ln)
	}
	for _, e := range f.Evidence {
		t.Logf("  %s = %s", e.Name, e.Value)
	}
}

// TestCloseWaitLeak: 150 connections the peer closed and this process
// never closes.
func TestCloseWaitLeak(t *testing.T) {
	ns := testns.New(t, "cw")
	var ln netip.AddrPort
	In(t, ns, func() error {
		lfd, a, err := Listen(t, 4096, nil)
		if err != nil {
			return err
		}
		ln = a
		for i := 0; i < 150; i++ {
			c, err := Dial(a, nil)
			if err != nil {
				return err
			}
			s, err := Accept(lfd)
			if err != nil {
				return err
			}
			Close(t, s) // held until the test ends: the leak
			unix.Close(c)
		}
		return nil
	})
	r, b, _ := Sample(t, ns, time.Second, nil)
	f := one(t, r, b, "close-wait-leak")
	if f.Subject.Pid != os.Getpid() {
		t.Errorf("subject %+v, want pid %d", f.Subject, os.Getpid())
	}
	_ = ln
}

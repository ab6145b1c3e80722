// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

func TestWatchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"watch", "--kind", "nosuch"},
		{"watch", "--port", "70000"},
		{"watch", "--tick", "0s"},
		{"watch", "--count", "-1"},
	} {
		if code, _, stderr := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, ExitUsage, stderr)
		}
	}
	// The test Env has no eBPF loader: watch cannot run and says so.
	code, _, stderr := run(t, "watch", "--duration", "1s")
	if code != ExitCollect || !strings.Contains(stderr, "no eBPF loader") {
		t.Errorf("watch without eBPF: exit %d, %q", code, stderr)
	}
}

// TestWatchFailedConnects runs `watch --json` against the real eBPF
// source and makes connect() fail for want of a port in a namespace of
// our own: the lines name this process, the destination and the
// namespace.
func TestWatchFailedConnects(t *testing.T) {
	testns.NeedRoot(t)
	src, err := bpfload.Programs().Events(nil)
	if err != nil {
		t.Skipf("eBPF events cannot load here: %v", err)
	}
	_ = src.Close()
	ns := testns.New(t, "watch")
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40001")
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: time.Now,
		Sleep: window.Sleep, ProcRoot: "/proc", BPF: bpfload.Programs()}
	done := make(chan int)
	go func() {
		done <- Main([]string{"watch", "--json", "--netns", ns.Name, "--kind", "failed-connect", "--count", "3", "--duration", "20s"}, e)
	}()
	// Until watch has printed three lines: it starts to listen after
	// loading, so connects fail on a loop, a few a second.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	provoked := make(chan error, 1)
	go func() { provoked <- failConnects(ctx, ns) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end")
	}
	cancel()
	if err := <-provoked; err != nil {
		t.Fatal(err)
	}
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, m := range watchLines(t, out.String(), 3) {
		if m.Kind != "failed-connect" || m.Netns != ns.Name || m.Remote != "127.0.0.2:9090" ||
			m.Reason != "EADDRNOTAVAIL" || m.Pid == nil || *m.Pid != os.Getpid() {
			t.Errorf("line %s: want failed-connect in %s from pid %d to 127.0.0.2:9090", m.text, ns.Name, os.Getpid())
		}
	}
}

// watchLine is what the tests read of one `watch --json` line.
type watchLine struct {
	Kind, Netns, Remote, Reason string
	Pid                         *int
	text                        string
}

// watchLines decodes watch's JSON output, which must hold n lines.
func watchLines(t *testing.T, out string, n int) []watchLine {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), n, out)
	}
	ms := make([]watchLine, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &ms[i]); err != nil {
			t.Fatal(err)
		}
		ms[i].text = l
	}
	return ms
}

// failConnects holds the namespace's two ephemeral ports towards
// 127.0.0.2:9090 and then connects again every 50 ms (each fails with
// EADDRNOTAVAIL) until ctx is done.
func failConnects(ctx context.Context, ns netns.NS) error {
	return netns.Do(ns, func() error {
		lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(lfd)
		sa := &syscall.SockaddrInet4{Port: 9090, Addr: [4]byte{127, 0, 0, 2}}
		if err := syscall.Bind(lfd, sa); err != nil {
			return err
		}
		if err := syscall.Listen(lfd, 16); err != nil {
			return err
		}
		var held []int
		defer func() {
			for _, fd := range held {
				_ = syscall.Close(fd)
			}
		}()
		for i := 0; ctx.Err() == nil && i < 600; i++ {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = syscall.Connect(fd, sa)
			switch {
			case err == nil:
				held = append(held, fd)
				continue
			case !errors.Is(err, syscall.EADDRNOTAVAIL):
				_ = syscall.Close(fd)
				return err
			}
			_ = syscall.Close(fd)
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
}

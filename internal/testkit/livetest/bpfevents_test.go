// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestListenOverflowEBPFEvidence: the CLI (check --bpf on) names the
// listener that dropped handshakes from kfree_skb TCP_LISTEN_OVERFLOW and
// counts the clients' SYN retransmits to it. The listener has backlog 1
// and TCP_DEFER_ACCEPT and never accepts: every client's handshake is
// answered while its queue is empty, and their first data finds it full
// (docs/bpf.md).
func TestListenOverflowEBPFEvidence(t *testing.T) {
	ns := testns.New(t, "lobpf")
	src, err := bpfsource.Open(bpfsource.Options{Programs: []string{"kfree_skb"}})
	if errors.Is(err, bpfsource.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	const port = 8080
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}()
	In(t, ns, func() error {
		lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, lfd)
		if err := syscall.SetsockoptInt(lfd, syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 5); err != nil {
			return err
		}
		if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		return syscall.Listen(lfd, 1)
	})
	burst := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // inside the CLI's window
		burst <- netns.Do(ns, func() error {
			var cfds []int
			for range 40 {
				fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
				if err != nil {
					return err
				}
				cfds = append(cfds, fd)
				err = syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
				if err != nil && !errors.Is(err, syscall.EINPROGRESS) {
					return err
				}
			}
			time.Sleep(50 * time.Millisecond)
			for _, fd := range cfds {
				_, _ = syscall.Write(fd, []byte("hello"))
			}
			fds = append(fds, cfds...)
			return nil
		})
	}()
	var out, errb bytes.Buffer
	env := cli.DefaultEnv()
	env.Stdout, env.Stderr, env.IsTTY = &out, &errb, false
	code := cli.Main([]string{"check", "--netns", ns.Name, "--interval", "2s", "--json", "--bpf", "on"}, env)
	if err := <-burst; err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	f := one(t, r, out.Bytes(), "listen-overflow")
	drops := Evidence(f, "overflow drops (eBPF)")
	syns := Evidence(f, "SYN retransmits to it (eBPF)")
	t.Logf("evidence: %q; %q; ListenOverflows %q", drops, syns, Evidence(f, "ListenOverflows"))
	m := regexp.MustCompile(`^listener 127\.0\.0\.1:8080 dropped ([1-9][0-9]*) handshakes in `).FindStringSubmatch(drops)
	if m == nil {
		t.Fatalf("overflow drops evidence %q: want the listener and a count", drops)
	}
	if want := fmt.Sprintf("listener 127.0.0.1:8080 dropped %s handshakes (kfree_skb TCP_LISTEN_OVERFLOW)", m[1]); !strings.Contains(f.Summary, want) {
		t.Errorf("summary %q lacks %q", f.Summary, want)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* in .*127\.0\.0\.1:8080 [1-9]`).MatchString(syns) {
		t.Errorf("SYN retransmit evidence %q: want the clients' retransmits to 127.0.0.1:8080", syns)
	}
}

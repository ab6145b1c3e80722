// SPDX-License-Identifier: Apache-2.0

// Package testns gives root tests a named network namespace of their own,
// removed when the test ends (also when it fails).
package testns

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

// NeedRoot skips the test unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, sock_diag of other namespaces)")
	}
}

// New creates namespace "tdt-<prefix>-<random>" with lo up and returns it.
func New(t testing.TB, prefix string) netns.NS {
	t.Helper()
	NeedRoot(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "tdt-" + prefix + "-" + hex.EncodeToString(b[:])
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	ns, err := netns.Default().Named(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Tcpdoctor builds cmd/tcpdoctor into the test's temporary directory and
// returns its path: the real binary, for tests that run it as a user
// would (never the test binary itself, which would run the tests again).
func Tcpdoctor(t testing.TB) string {
	t.Helper()
	return build(t, t.TempDir(), "tcpdoctor")
}

// Lab builds cmd/tcpdoctor-lab and, beside it, cmd/tcpdoctor (the
// binary the lab runs, found next to itself) into the test's temporary
// directory, and returns tcpdoctor-lab's path.
func Lab(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	build(t, dir, "tcpdoctor")
	return build(t, dir, "tcpdoctor-lab")
}

// build builds the command cmd/name into dir.
func build(t testing.TB, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tcpdoctor/tcpdoctor/cmd/"+name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// DialAccept connects to ln and accepts the connection: both ends.
func DialAccept(ln net.Listener) (client, server net.Conn, err error) {
	c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// Connections opens a listener on 127.0.0.1 in ns and n connections to
// it, each as its client and server ends; all are closed when t ends.
func Connections(t testing.TB, ns netns.NS, n int) [][2]net.Conn {
	t.Helper()
	return ConnectionsAt(t, ns, "127.0.0.1:0", n)
}

// ConnectionsAt is Connections with the listener at addr.
func ConnectionsAt(t testing.TB, ns netns.NS, addr string, n int) [][2]net.Conn {
	t.Helper()
	var conns [][2]net.Conn
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = ln.Close() })
		for range n {
			a, b, err := DialAccept(ln)
			if err != nil {
				return err
			}
			conns = append(conns, [2]net.Conn{a, b})
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return conns
}

// RefusedDst is where Refusals connects: nothing listens there.
const RefusedDst = "127.0.0.1:1"

// Refusals connects to RefusedDst in ns every 20 ms, as a health checker
// against a closed port does, until the returned stop is called (at most
// 60 s); stop fails t if a connect was not refused and returns how many
// were.
func Refusals(t testing.TB, ns netns.NS) (stop func() int) {
	t.Helper()
	done := make(chan struct{})
	result := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		n := 0
		errc <- netns.Do(ns, func() error {
			sa := &syscall.SockaddrInet4{Port: 1, Addr: [4]byte{127, 0, 0, 1}}
			for i := 0; i < 3000; i++ {
				select {
				case <-done:
					return nil
				default:
				}
				fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				err = syscall.Connect(fd, sa)
				_ = syscall.Close(fd)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					return fmt.Errorf("connect %s: %w, want ECONNREFUSED", RefusedDst, err)
				}
				n++
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		})
		result <- n
	}()
	var once sync.Once
	n := 0
	return func() int {
		once.Do(func() {
			close(done)
			n = <-result
			if err := <-errc; err != nil {
				t.Error(err)
			}
		})
		return n
	}
}

// Child starts cmd, a helper process that says one line on stdout when
// ready and exits when its stdin closes, and returns that line (without
// its newline) or why there is none within 10 s. The child is stopped
// when the test ends (stdin closed, then killed after 5 s), also on
// failure.
func Child(t testing.TB, cmd *exec.Cmd) (string, error) {
	t.Helper()
	line, _, err := ChildIn(t, cmd)
	return line, err
}

// ChildIn is Child that also gives the child's stdin, for a helper that
// waits for a word from the test before it goes on.
func ChildIn(t testing.TB, cmd *exec.Cmd) (string, io.Writer, error) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	type said struct {
		line string
		err  error
	}
	c := make(chan said, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		c <- said{strings.TrimSuffix(line, "\n"), err}
	}()
	select {
	case s := <-c:
		return s.line, stdin, s.err
	case <-time.After(10 * time.Second):
		return "", stdin, errors.New("the child said nothing within 10 s")
	}
}

// Buffer is an io.Writer a child process or server goroutine writes
// while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

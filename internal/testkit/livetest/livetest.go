// SPDX-License-Identifier: Apache-2.0

// Package livetest holds root tests that create each rule's condition for
// real in a namespace the test owns, sample it with the collector, run the
// rules and check the JSON names the right rule and subject. This file is
// the small socket and sampling toolkit they share.
package livetest

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Sysctl sets namespace sysctls ("key=value") with ip netns exec.
func Sysctl(t testing.TB, ns netns.NS, kv ...string) {
	t.Helper()
	for _, s := range kv {
		out, err := exec.Command("ip", "netns", "exec", ns.Name, "sysctl", "-q", "-w", s).CombinedOutput()
		if err != nil {
			t.Fatalf("sysctl %s in %s: %v\n%s", s, ns.Name, err, out)
		}
	}
}

// In runs fn on a thread inside ns; sockets it creates stay in ns.
func In(t testing.TB, ns netns.NS, fn func() error) {
	t.Helper()
	if err := netns.Do(ns, fn); err != nil {
		t.Fatal(err)
	}
}

// Close closes fds at cleanup.
func Close(t testing.TB, fds ...int) {
	t.Cleanup(func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
}

// Listen creates a blocking TCP listener on 127.0.0.1:0 with backlog,
// after setup (if any) ran on the fresh socket. Call inside In. The fd is
// closed at cleanup.
func Listen(t testing.TB, backlog int, setup func(fd int) error) (int, netip.AddrPort, error) {
	return listenOn(t, netip.AddrFrom4([4]byte{127, 0, 0, 1}), backlog, setup)
}

// listenOn is Listen on addr:0.
func listenOn(t testing.TB, addr netip.Addr, backlog int, setup func(fd int) error) (int, netip.AddrPort, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	Close(t, fd)
	if setup != nil {
		if err := setup(fd); err != nil {
			return -1, netip.AddrPort{}, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		return -1, netip.AddrPort{}, err
	}
	if err := unix.Listen(fd, backlog); err != nil {
		return -1, netip.AddrPort{}, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	return fd, netip.AddrPortFrom(addr, uint16(sa.(*unix.SockaddrInet4).Port)), nil
}

// Dial connects a new TCP socket to dst, blocking, after setup ran on it.
// Call inside In. The caller owns the fd.
func Dial(dst netip.AddrPort, setup func(fd int) error) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if setup != nil {
		if err := setup(fd); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// DialNB starts a non-blocking connect to dst and returns at once. Call
// inside In. The caller owns the fd.
func DialNB(dst netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())})
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Accept accepts one connection on a blocking listener.
func Accept(lfd int) (int, error) {
	fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	return fd, err
}

// Collect takes one snapshot of ns with owners and SO_BUF_LOCK probing.
func Collect(ns netns.NS) *snapshot.Snapshot {
	c := &collect.Collector{Opts: collect.Options{Owners: true, BufLock: true}, Now: time.Now}
	return c.Collect([]netns.NS{ns})[0]
}

// Report is the part of the JSON result the tests read.
type Report struct {
	Findings []diag.Finding `json:"findings"`
	Unknown  []diag.Unknown `json:"unknown"`
}

// Diagnose runs every rule over prev and cur the way check does, and
// returns the result as it comes back from JSON, plus the JSON.
func Diagnose(t testing.TB, prev, cur *snapshot.Snapshot) (Report, []byte) {
	t.Helper()
	for _, s := range []*snapshot.Snapshot{prev, cur} {
		for _, e := range s.Errors {
			t.Logf("collection note %s: %s", e.Source, e.Err)
		}
	}
	var res diag.Result
	diag.Run(rules.All(), diag.NewInput(prev, cur, diag.Options{}), &res)
	res.Sort()
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, b
}

// Sample takes a snapshot, runs during (which creates or sustains the
// condition), waits until interval has passed since the first snapshot,
// takes the second and diagnoses.
func Sample(t testing.TB, ns netns.NS, interval time.Duration, during func()) (Report, []byte, *snapshot.Snapshot) {
	t.Helper()
	prev := Collect(ns)
	if during != nil {
		during()
	}
	if d := interval - time.Since(prev.Taken); d > 0 {
		time.Sleep(d)
	}
	cur := Collect(ns)
	r, b := Diagnose(t, prev, cur)
	return r, b, cur
}

// Find returns the findings of rule at or above sev.
func (r Report) Find(rule string, sev diag.Severity) []diag.Finding {
	var out []diag.Finding
	for _, f := range r.Findings {
		if f.Rule == rule && f.Severity >= sev {
			out = append(out, f)
		}
	}
	return out
}

// Evidence returns the value of the named evidence, "" if absent.
func Evidence(f diag.Finding, name string) string {
	for _, e := range f.Evidence {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Record writes the samples to $LIVETEST_RECORD/name.jsonl when that
// variable is set: real captures to cut rule fixtures from.
func Record(t testing.TB, name string, snaps ...*snapshot.Snapshot) {
	dir := os.Getenv("LIVETEST_RECORD")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := snapshot.NewWriter(f, "livetest")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
}

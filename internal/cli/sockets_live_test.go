// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestSocketsListsWhatSSLists fills a namespace of its own with a listener,
// 200 connections (both ends held here) and a few TIME_WAIT sockets, then
// checks that `sockets` (JSON and text) lists exactly the sockets `ss -tina`
// lists, also with the state and port filters the kernel now applies.
func TestSocketsListsWhatSSLists(t *testing.T) {
	ns := testns.New(t, "skl")
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	const conns, closed = 200, 5
	var port int
	err := netns.Do(ns, func() error {
		l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 512); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		for i := range conns + closed {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := unix.Connect(c, sa); err != nil {
				unix.Close(c)
				return err
			}
			a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
			if err != nil {
				unix.Close(c)
				return err
			}
			if i < conns {
				fds = append(fds, c, a)
				continue
			}
			// The client closes first: its end goes to TIME_WAIT.
			unix.Close(c)
			time.Sleep(10 * time.Millisecond)
			unix.Close(a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the closes settle into TIME_WAIT

	lp := strconv.Itoa(port)
	for _, tc := range []struct {
		args   []string // to sockets
		ssArgs []string // to ss -tinaH: a port filter (a state filter drops ss's State column)
		states []string // ss's rows kept, by state; nil keeps all
		want   int
	}{
		// Without owners first: TIME_WAIT lasts 60 s, and a walk of /proc on
		// a host holding a million sockets takes seconds.
		{[]string{"--no-owners", "--state", "time-wait,listen"}, nil, []string{"TIME-WAIT", "LISTEN"}, 1 + closed},
		{[]string{"--no-owners", "--state", "established"}, nil, []string{"ESTAB"}, 2 * conns},
		{[]string{"--no-owners", "--lport", lp}, []string{"sport = :" + lp}, nil, 1 + conns},
		{[]string{"--no-owners", "--port", lp, "--state", "established"}, []string{"( sport = :" + lp + " or dport = :" + lp + " )"}, []string{"ESTAB"}, 2 * conns},
		{nil, nil, nil, 1 + 2*conns + closed},
	} {
		ssOut := testns.Run(t, "ip", append([]string{"netns", "exec", ns.Name, "ss", "-tinaH"}, tc.ssArgs...)...)
		want := ssTuples(ssOut, tc.states)
		if len(want) != tc.want {
			t.Fatalf("ss %v lists %d sockets, the test made %d:\n%s", tc.ssArgs, len(want), tc.want, ssOut)
		}
		args := append([]string{"sockets", "--netns", ns.Name, "--bpf", "off"}, tc.args...)
		code, out, stderr := run(t, append(args, "--json")...)
		if code != ExitOK {
			t.Fatalf("%v --json: exit %d: %s", args, code, stderr)
		}
		var rows []struct {
			State, Local, Remote string
			Pid                  *int
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v --json: %v\n%.300s", args, err, out)
		}
		var got []string
		for _, r := range rows {
			got = append(got, tuple(r.State, r.Local, r.Remote))
			held := r.State == "ESTAB" || r.State == "LISTEN"
			if held && tc.args == nil && (r.Pid == nil || *r.Pid != os.Getpid()) {
				t.Errorf("%v: %s %s -> %s owned by %v, want pid %d", args, r.State, r.Local, r.Remote, r.Pid, os.Getpid())
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%v --json lists %d sockets, ss %d; first differences: %v", args, len(got), len(want), firstDiff(got, want))
		}
		code, out, stderr = run(t, args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "State ") {
			t.Fatalf("%v: no header:\n%.300s", args, out)
		}
		got = got[:0]
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 5 {
				t.Fatalf("%v: short row %q", args, l)
			}
			got = append(got, tuple(f[0], f[3], f[4]))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%v lists %d sockets, ss %d; first differences: %v", args, len(got), len(want), firstDiff(got, want))
		}
	}
}

// tuple names a socket the same way from ss and from sockets (a
// listener's peer is "*" in both).
func tuple(state, local, remote string) string {
	if state == "LISTEN" {
		remote = "*"
	}
	return state + " " + local + " " + remote
}

// ssTuples lists the sockets of `ss -tinaH` output in the given states
// (nil: all), sorted; the tcp_info lines under each start with white space.
func ssTuples(out string, states []string) []string {
	var t []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || l[0] == ' ' || l[0] == '\t' {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		state := f[0]
		if state == "UNCONN" {
			state = "CLOSE"
		}
		if states != nil && !slices.Contains(states, state) {
			continue
		}
		t = append(t, tuple(state, f[3], f[4]))
	}
	slices.Sort(t)
	return t
}

func firstDiff(got, want []string) []string {
	var d []string
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok && len(d) < 3 {
			d = append(d, "extra "+g)
		}
	}
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok && len(d) < 6 {
			d = append(d, "missing "+w)
		}
	}
	return d
}

// TestSocketsIntervalShares: with --interval, a connection sending all the
// time shows a window of about the interval and a busy share, from the
// first sample's chronographs kept by cookie.
func TestSocketsIntervalShares(t *testing.T) {
	ns := testns.New(t, "ski")
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	var port int
	var c, a int
	err := netns.Do(ns, func() error {
		l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 8); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		if c, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		fds = append(fds, c)
		if err := unix.Connect(c, sa); err != nil {
			return err
		}
		a, _, err = unix.Accept4(l, unix.SOCK_CLOEXEC)
		fds = append(fds, a)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sender writes and the receiver reads until the test ends:
	// shutdown wakes both from a blocked call (close alone would not).
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		_ = unix.Shutdown(c, unix.SHUT_RDWR)
		_ = unix.Shutdown(a, unix.SHUT_RDWR)
	})
	go func() {
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := unix.Write(c, buf); err != nil {
				return
			}
		}
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if n, err := unix.Read(a, buf); err != nil || n == 0 {
				return
			}
		}
	}()
	code, out, stderr := run(t, "sockets", "--netns", ns.Name, "--bpf", "off", "--no-owners", "--interval", "300ms", "--json", "--rport", strconv.Itoa(port))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []struct {
		State   string
		Limited *struct {
			WindowMS float64 `json:"window_ms"`
			Busy     float64
		}
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("rows %+v (%v):\n%s", rows, err, out)
	}
	l := rows[0].Limited
	if l == nil || l.WindowMS < 250 || l.WindowMS > 2000 || l.Busy <= 0 {
		t.Errorf("sender's shares %+v, want a window of about 300 ms and a busy share", l)
	}
	code, out, _ = run(t, "sockets", "--netns", ns.Name, "--bpf", "off", "--no-owners", "--interval", "100ms", "--rport", strconv.Itoa(port))
	if code != ExitOK || !strings.Contains(out, "Busy") || !strings.Contains(out, "%") {
		t.Errorf("text with --interval: exit %d\n%s", code, out)
	}
}

// SPDX-License-Identifier: Apache-2.0

package topo

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestHostAddrs(t *testing.T) {
	a, err := hostAddrs(serverNet, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{a[0].String(), a[1].String(), a[2].String()}
	if strings.Join(got, " ") != "198.18.2.2 198.18.2.3 198.18.2.4" {
		t.Fatalf("addresses %v", got)
	}
	if _, err := hostAddrs(serverNet, 201); err == nil {
		t.Fatal("201 addresses accepted")
	}
}

func TestBadInput(t *testing.T) {
	for _, run := range []string{"UPPER", "a/b", "x y", strings.Repeat("a", 21)} {
		if _, err := Build(Config{Run: run, Runner: failRunner(t)}); err == nil || !strings.HasPrefix(err.Error(), "topo: ") {
			t.Errorf("run %q: err %v", run, err)
		}
	}
	if _, err := Build(Config{Run: "ok", CC: "vegas", Runner: failRunner(t)}); err == nil {
		t.Error("unknown cc accepted")
	}
	if err := Clean(context.Background(), failRunner(t), "other-"); err == nil {
		t.Error("clean accepted a foreign prefix")
	}
	if err := Do("../x", func() error { return nil }); err == nil {
		t.Error("Do accepted a path")
	}
}

func failRunner(t *testing.T) Runner {
	return func(ctx context.Context, name string, args ...string) ([]byte, error) {
		t.Fatalf("command run on bad input: %s %v", name, args)
		return nil, nil
	}
}

func TestBuildRunsCommands(t *testing.T) {
	var cmds []string
	rec := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		cmds = append(cmds, name+" "+strings.Join(args, " "))
		return nil, nil
	}
	// Do fails without root or without the namespace: the build must then
	// report it and clean up by name.
	dir := t.TempDir()
	_, err := Build(Config{Run: "unit0", CC: "cubic", ServerAddrs: 2, Runner: rec, StateDir: dir})
	if err == nil {
		t.Fatal("build succeeded without namespaces")
	}
	if _, err := os.Stat(ownerPath(dir, "unit0")); !os.IsNotExist(err) {
		t.Errorf("owner file left after a failed build: %v", err)
	}
	all := strings.Join(cmds, "\n")
	for _, want := range []string{
		"ip netns add tdlab-unit0-router",
		"ip -n tdlab-unit0-router link add to-client type veth peer name eth0 netns tdlab-unit0-client",
		"ip -n tdlab-unit0-server addr add 198.18.2.3/24 dev eth0",
		"ip -n tdlab-unit0-client route add default via 198.18.1.1 dev eth0 congctl cubic",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// Build builds a topology for a test and removes it at the end, checking
// that nothing of the run is left.
func buildForTest(t *testing.T, cfg Config) *Topo {
	t.Helper()
	tp, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Error(err)
		}
		left, err := List(Prefix + tp.Run + "-")
		if err != nil || len(left) > 0 {
			t.Errorf("left after Close: %v %v", left, err)
		}
		if _, err := os.Stat(ownerPath(DefaultStateDir, tp.Run)); !os.IsNotExist(err) {
			t.Errorf("owner file left after Close: %v", err)
		}
	})
	return tp
}

func TestBuildAndClose(t *testing.T) {
	needRoot(t)
	tp := buildForTest(t, Config{ServerAddrs: 3, CC: "cubic"})
	names, err := List(Prefix + tp.Run + "-")
	if err != nil || len(names) != 3 {
		t.Fatalf("namespaces %v %v", names, err)
	}
	out, err := tp.Cmd(context.Background(), "ip", tp.Client, "route", "show", "default")
	if err != nil || !strings.Contains(string(out), "congctl cubic") {
		t.Fatalf("client route %q %v", out, err)
	}
	// Every server address answers a TCP connect from the client through
	// the router, and the connection uses the route's cc.
	var ln net.Listener
	if err := tp.Do(tp.Server, func() (err error) {
		ln, err = net.Listen("tcp4", ":7000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hi")
			c.Close()
		}
	}()
	for _, a := range tp.ServerAddrs {
		var c net.Conn
		if err := tp.Do(tp.Client, func() (err error) {
			c, err = net.DialTimeout("tcp4", net.JoinHostPort(a.String(), "7000"), 2*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		cc, err := congestion(c)
		if err != nil || cc != "cubic" {
			t.Errorf("connection cc %q %v, want cubic", cc, err)
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "hi" {
			t.Fatalf("%v answered %q", a, b)
		}
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func congestion(c net.Conn) (string, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return "", err
	}
	var cc string
	var serr error
	err = rc.Control(func(fd uintptr) {
		cc, serr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return strings.TrimRight(cc, "\x00"), errors.Join(err, serr)
}

// Clean spares a run whose owner is alive and removes it once the owner
// file names a process that is gone.
func TestCleanPrefix(t *testing.T) {
	needRoot(t)
	tp := buildForTest(t, Config{})
	if err := Clean(context.Background(), nil, Prefix+tp.Run+"-"); err != nil {
		t.Fatal(err)
	}
	if left, _ := List(Prefix + tp.Run + "-"); len(left) != 3 {
		t.Fatalf("clean removed a live run: %v left", left)
	}
	// pid 1 with another start time: a dead owner.
	if err := os.WriteFile(ownerPath(DefaultStateDir, tp.Run), []byte("1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Clean(context.Background(), nil, Prefix+tp.Run+"-"); err != nil {
		t.Fatal(err)
	}
	if left, _ := List(Prefix + tp.Run + "-"); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
	if _, err := os.Stat(ownerPath(DefaultStateDir, tp.Run)); !os.IsNotExist(err) {
		t.Errorf("owner file left: %v", err)
	}
}

func TestParseStart(t *testing.T) {
	stat := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 200"
	if v, err := parseStart(stat); err != nil || v != 987654 {
		t.Fatalf("%d %v", v, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x"} {
		if _, err := parseStart(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if run, ok := runOf("tdlab-ab12cd-router"); !ok || run != "ab12cd" {
		t.Errorf("runOf: %q %v", run, ok)
	}
	if _, ok := runOf("tdlab-x"); ok {
		t.Error("runOf accepted a name without a role")
	}
}

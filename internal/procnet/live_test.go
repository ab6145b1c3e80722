// SPDX-License-Identifier: Apache-2.0

package procnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestFillLive reads this host's own namespace; it needs no root.
func TestFillLive(t *testing.T) {
	s := fill(t, Default())
	if len(s.Errors) != 0 {
		t.Fatalf("errors reading the live host: %+v", s.Errors)
	}
	checkLive(t, s)
	longest := 0
	for _, f := range []string{"netstat", "snmp"} {
		b, err := os.ReadFile("/proc/self/net/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			longest = max(longest, len(line))
		}
	}
	t.Logf("the longest line of /proc/net/netstat and snmp: %d bytes (maxLine %d)", longest, maxLine)
	if longest >= maxLine {
		t.Errorf("a %d-byte line reaches maxLine %d", longest, maxLine)
	}
	for _, name := range SysctlNames() {
		v, ok := s.Sysctls[name]
		raw, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		if ok != (err == nil) {
			t.Errorf("%s: in snapshot %v, readable %v", name, ok, err)
			continue
		}
		// fs.file-nr counts open files, which move between the two reads.
		if ok && name != "fs.file-nr" && v != strings.Join(strings.Fields(string(raw)), " ") {
			t.Errorf("%s = %q, file has %q", name, v, raw)
		}
	}
}

// checkLive checks what every Linux netns of a modern kernel shows.
func checkLive(t *testing.T, s *snapshot.Snapshot) {
	t.Helper()
	for _, k := range []string{"TcpExt.ListenOverflows", "TcpExt.ListenDrops", "TcpExt.TCPTimeWaitOverflow", "Tcp.ActiveOpens", "Tcp.RetransSegs", "IpExt.InOctets"} {
		if _, ok := s.Counter(k); !ok {
			t.Errorf("counter %s absent", k)
		}
	}
	if v, ok := s.Counter("Tcp.MaxConn"); !ok || v != -1 {
		t.Errorf("Tcp.MaxConn = %d, %v; want -1", v, ok)
	}
	for _, k := range []string{"sockets.used", "TCP.inuse", "TCP.tw", "TCP.orphan"} {
		if _, ok := s.Sockstat[k]; !ok {
			t.Errorf("sockstat %s absent", k)
		}
	}
	lo, hi, err := PortRange(s.Sysctls["net.ipv4.ip_local_port_range"])
	if err != nil || lo < 1 || hi <= lo {
		t.Errorf("ip_local_port_range: %d-%d, %v", lo, hi, err)
	}
	if _, err := ReservedPorts(s.Sysctls["net.ipv4.ip_local_reserved_ports"]); err != nil {
		t.Error(err)
	}
}

// TestFillNetns collects from a namespace it creates, on a thread that
// did setns, and checks it sees that namespace's counters and sysctls.
func TestFillNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	name := fmt.Sprintf("tcpdoctor-procnet-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	run("ip", "-n", name, "link", "set", "lo", "up")
	run("ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.core.somaxconn=77")

	host := fill(t, Default())
	if len(host.Errors) != 0 {
		t.Fatalf("host errors: %+v", host.Errors)
	}
	if host.Sysctls["net.core.somaxconn"] == "77" {
		t.Fatal("host somaxconn is already 77; the test could not tell namespaces apart")
	}

	hostIno := nsIno("/proc/thread-self/ns/net")
	const conns = 5
	type result struct {
		ns, self *snapshot.Snapshot
		mainIno  uint64 // netns of the process's main thread, seen from the setns thread
		err      error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine instead of
		// going back to the pool inside the namespace.
		runtime.LockOSThread()
		ns, self, err := inNetns(name, conns)
		done <- result{ns, self, nsIno("/proc/self/ns/net"), err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("netns collection timed out")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	ns := r.ns
	if len(ns.Errors) != 0 {
		t.Fatalf("netns errors: %+v", ns.Errors)
	}
	checkLive(t, ns)
	if v := ns.Sysctls["net.core.somaxconn"]; v != "77" {
		t.Errorf("netns somaxconn = %q, want 77 (host has %q)", v, host.Sysctls["net.core.somaxconn"])
	}
	// A fresh namespace has seen exactly the connections made in it.
	for _, k := range []string{"Tcp.ActiveOpens", "Tcp.PassiveOpens"} {
		if v, _ := ns.Counter(k); v != conns {
			t.Errorf("netns %s = %d, want %d", k, v, conns)
		}
	}
	if v, _ := ns.Counter("TcpExt.ListenOverflows"); v != 0 {
		t.Errorf("netns ListenOverflows = %d", v)
	}
	// /proc/self/net follows the process's main thread, not this one. While
	// the main thread is in the host netns, it shows the host's counters.
	// (A goroutine that exits locked after setns on the main thread leaves
	// it wedged in that netns; then /proc/self/net shows that one.)
	a := r.self.Counters["Tcp.ActiveOpens"]
	if r.mainIno != hostIno {
		t.Logf("main thread is in netns inode %d, not the host's %d: /proc/self/net shows Tcp.ActiveOpens %d", r.mainIno, hostIno, a)
	} else if h := host.Counters["Tcp.ActiveOpens"]; a < h {
		t.Errorf("/proc/self/net on the setns thread: Tcp.ActiveOpens %d, below the host's earlier %d", a, h)
	} else {
		t.Logf("/proc/self/net on the setns thread: Tcp.ActiveOpens %d (host); /proc/thread-self/net: %d", a, ns.Counters["Tcp.ActiveOpens"])
	}
}

// inNetns, on a locked thread, enters the named netns, makes conns
// loopback connections there and collects with Default and /proc/self/net.
func inNetns(name string, conns int) (ns, self *snapshot.Snapshot, err error) {
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, nil, fmt.Errorf("setns: %w", err)
	}
	var want, got unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		return nil, nil, err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil {
		return nil, nil, err
	}
	if want.Ino != got.Ino {
		return nil, nil, fmt.Errorf("thread netns inode %d, want %d", got.Ino, want.Ino)
	}
	if err := connect(conns); err != nil {
		return nil, nil, err
	}
	ns, self = &snapshot.Snapshot{}, &snapshot.Snapshot{}
	Default().Fill(ns)
	FS{NetDir: "/proc/self/net", SysDir: "/proc/sys"}.Fill(self)
	return ns, self, nil
}

// nsIno returns the inode of a namespace link, 0 if unreadable.
func nsIno(path string) uint64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// connect makes n connections to a listener on 127.0.0.1 and closes them.
func connect(n int) error {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.Close()
		}
		accepted <- nil
	}()
	d := net.Dialer{Timeout: 2 * time.Second}
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		c.Close()
	}
	select {
	case err := <-accepted:
		return err
	case <-time.After(5 * time.Second):
		return fmt.Errorf("accept timed out")
	}
}

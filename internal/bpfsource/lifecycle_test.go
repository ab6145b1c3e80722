// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// rawFlow encodes a flows entry through the types bpf2go generated from
// bpf/lifecycle.c, so the decoder is checked against the C layout.
func rawFlow(ns, pid uint32, comm string, addr netip.Addr, port uint16, c [6]uint64) ([]byte, []byte) {
	key := lifecycleFlowKey{Netns: ns, Pid: pid, Dport: port, Family: syscall.AF_INET6}
	if addr.Is4() {
		key.Family = syscall.AF_INET
		a := addr.As4()
		copy(key.Daddr[:], a[:])
	} else {
		a := addr.As16()
		copy(key.Daddr[:], a[:])
	}
	val := lifecycleFlowCounts{Opens: c[0], FailedPorts: c[1], ActiveCloses: c[2], PeerCloses: c[3], LifetimeNs: c[4], Lifetimes: c[5]}
	copy(val.Comm[:], comm)
	k, err := binary.Append(nil, binary.NativeEndian, key)
	if err != nil {
		panic(err)
	}
	v, err := binary.Append(nil, binary.NativeEndian, val)
	if err != nil {
		panic(err)
	}
	return k, v
}

func TestDecodeFlow(t *testing.T) {
	k, v := rawFlow(4026531840, 812, "nginx", netip.MustParseAddr("10.0.0.5"), 8080, [6]uint64{5, 412, 3, 1, 2_000_000, 4})
	ns, f, err := decodeFlow(k, v)
	if err != nil {
		t.Fatal(err)
	}
	want := Flow{Pid: 812, Comm: "nginx", Peer: netip.MustParseAddrPort("10.0.0.5:8080"), Opens: 5, FailedPorts: 412,
		ActiveCloses: 3, PeerCloses: 1, LifetimeTotal: 2 * time.Millisecond, Lifetimes: 4}
	if ns != 4026531840 || f != want {
		t.Errorf("decodeFlow = %d %+v, want %+v", ns, f, want)
	}
	k, v = rawFlow(1, 1, "a-sixteen-chars!", netip.MustParseAddr("2001:db8::1"), 443, [6]uint64{})
	if _, f, err = decodeFlow(k, v); err != nil || f.Comm != "a-sixteen-chars!" || f.Peer.String() != "[2001:db8::1]:443" {
		t.Errorf("decodeFlow v6 = %+v, %v", f, err)
	}
	k, v = rawFlow(1, 1, "x", netip.MustParseAddr("::ffff:10.1.2.3"), 80, [6]uint64{})
	if _, f, err = decodeFlow(k, v); err != nil || f.Peer.String() != "10.1.2.3:80" {
		t.Errorf("decodeFlow v4-mapped = %+v, %v", f, err)
	}
	if _, _, err := decodeFlow(k[:10], v); err == nil {
		t.Error("short key decoded")
	}
	k[28] = 99 // the family
	if _, _, err := decodeFlow(k, v); err == nil {
		t.Error("unknown family decoded")
	}
}

func FuzzDecodeFlow(f *testing.F) {
	k, v := rawFlow(4026531840, 812, "nginx", netip.MustParseAddr("10.0.0.5"), 8080, [6]uint64{5, 412, 3, 1, 2_000_000, 4})
	f.Add(k, v)
	k, v = rawFlow(1, 2, "python3", netip.MustParseAddr("fe80::1"), 1, [6]uint64{1 << 63, 1<<64 - 1})
	f.Add(k, v)
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, val []byte) {
		_, fl, err := decodeFlow(key, val)
		if err != nil {
			return
		}
		if !fl.Peer.IsValid() || fl.LifetimeTotal < 0 || len(fl.Comm) > 16 {
			t.Errorf("decoded %+v from %x %x", fl, key, val)
		}
	})
}

// comm is what the kernel calls this test binary's threads.
func comm(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestLifecycle provokes connects, active closes and EADDRNOTAVAIL in a
// namespace of its own and checks what the program counted, with and
// without the lifetime join, and with pid and comm from the helpers (the
// path of kernels without bpf_get_current_task_btf).
func TestLifecycle(t *testing.T) {
	for _, o := range []Options{{}, {Lifetimes: true}, {helperComm: true}} {
		t.Run(fmt.Sprintf("lifetimes=%v,helpers=%v", o.Lifetimes, o.helperComm), func(t *testing.T) { testLifecycle(t, o) })
	}
}

func testLifecycle(t *testing.T, opts Options) {
	lifetimes := opts.Lifetimes
	ns := testns.New(t, "bpf")
	src, err := Open(opts)
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := src.Close(); err != nil {
			t.Error(err)
		}
	}()
	var taskBTF uint32
	if err := src.life.TaskBtf.Get(&taskBTF); err != nil {
		t.Fatal(err)
	}
	t.Logf("pid and comm read from the task (bpf_get_current_task_btf): %v", taskBTF == 1)
	if opts.helperComm && taskBTF != 0 {
		t.Error("helperComm set, but the program reads the task")
	}
	const closes, failures = 20, 7
	var ln net.Listener
	var peer netip.AddrPort
	var failed int
	err = netns.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		peer = netip.MustParseAddrPort(ln.Addr().String())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					var b [1]byte
					_, _ = c.Read(b[:]) // until the client closes
					_ = c.Close()
				}()
			}
		}()
		// Connect and close first, one after another.
		for range closes {
			c, err := net.Dial("tcp4", peer.String())
			if err != nil {
				return err
			}
			_ = c.Close()
		}
		// A server that closes first: the client waits for its FIN.
		srv, err := net.Listen("tcp4", "127.0.0.1:8081")
		if err != nil {
			return err
		}
		defer func() { _ = srv.Close() }()
		go func() {
			for {
				c, err := srv.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		for range closes {
			c, err := net.Dial("tcp4", "127.0.0.1:8081")
			if err != nil {
				return err
			}
			var b [1]byte
			_, _ = c.Read(b[:])
			_ = c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	// Four ephemeral ports: the fifth connection held to one peer fails.
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40003")
	err = netns.Do(ns, func() error {
		ln2, err := net.Listen("tcp4", "127.0.0.2:9090")
		if err != nil {
			return err
		}
		defer func() { _ = ln2.Close() }()
		held, n, err := connectUntilNoPort(netip.MustParseAddrPort("127.0.0.2:9090"), 4+failures)
		defer func() {
			for _, fd := range held {
				_ = syscall.Close(fd)
			}
		}()
		failed = n
		if err != nil {
			return err
		}
		peer2 := netip.MustParseAddrPort(ln2.Addr().String())
		t.Logf("held %d connections to %v, %d connects failed with EADDRNOTAVAIL", len(held), peer2, failed)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Fatal("no connect failed with EADDRNOTAVAIL: the port range did not bite")
	}
	time.Sleep(200 * time.Millisecond) // FIN exchanges on loopback
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	pid, name := os.Getpid(), comm(t)
	var opens, active, ended, fails, peerCloses, srvCloses uint64
	for _, f := range r.ByNetns[ns.Inode] {
		t.Logf("%+v", f)
		if f.Pid != pid || f.Comm != name {
			continue
		}
		if f.Peer == peer {
			opens += f.Opens
			active += f.ActiveCloses
			ended += f.Lifetimes
		}
		if f.Peer == netip.MustParseAddrPort("127.0.0.1:8081") {
			peerCloses += f.PeerCloses
		}
		if f.LocalPort == 8081 && f.Peer == netip.MustParseAddrPort("0.0.0.0:0") {
			srvCloses += f.ActiveCloses
		}
		if f.Peer.Addr() == netip.MustParseAddr("127.0.0.2") {
			fails += f.FailedPorts
		}
	}
	if opens != closes || active != closes {
		t.Errorf("pid %d %s to %v: %d opens, %d active closes; want %d each", pid, name, peer, opens, active, closes)
	}
	want := uint64(0)
	if lifetimes {
		want = closes
	}
	if srvCloses != closes {
		t.Errorf("server closing first: %d active closes on :8081 under the server, want %d", srvCloses, closes)
	}
	if peerCloses != want || ended != want {
		t.Errorf("%d peer closes, %d lifetimes; want %d each", peerCloses, ended, want)
	}
	if fails != uint64(failed) {
		t.Errorf("%d failed port allocations counted, want %d", fails, failed)
	}
	if r.LostFlows != 0 {
		t.Errorf("%d events lost", r.LostFlows)
	}
	// Read empties the map: a second read has nothing from this namespace.
	r, err = src.Read()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.ByNetns[ns.Inode]); n != 0 {
		t.Errorf("second read: %d flows, want 0 (deltas)", n)
	}
}

// TestLifetimeCommIsOpeners: with lifetimes, a peer close counted after
// a Read emptied the map makes a new entry in another thread's context
// (the closer's, on loopback); its command must still be the opener's,
// from the socket's storage.
func TestLifetimeCommIsOpeners(t *testing.T) {
	ns := testns.New(t, "bpfcomm")
	src, err := Open(Options{Lifetimes: true, Programs: []string{"inet_sock_set_state"}})
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	const opener, closer, conns = "tdopener", "tdcloser", 3
	setName := func(name string) error {
		// This thread only: netns.Do's thread exits after fn.
		b := append([]byte(name), 0)
		return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
	}
	var clients, servers []net.Conn
	defer func() {
		for _, c := range append(clients, servers...) {
			_ = c.Close()
		}
	}()
	var first *Reading
	err = netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:8082")
		if err != nil {
			return err
		}
		defer func() { _ = ln.Close() }()
		if err := setName(opener); err != nil {
			return err
		}
		for range conns {
			c, s, err := testns.DialAccept(ln)
			if err != nil {
				return err
			}
			clients, servers = append(clients, c), append(servers, s)
		}
		if first, err = src.Read(); err != nil { // empties the map
			return err
		}
		// The server closes first: each client goes to CLOSE_WAIT in
		// the closer's context.
		if err := setName(closer); err != nil {
			return err
		}
		for _, s := range servers {
			_ = s.Close()
		}
		servers = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	opened := 0
	for _, f := range first.ByNetns[ns.Inode] {
		if f.Comm == opener {
			opened += int(f.Opens)
		}
	}
	if opened != conns {
		t.Fatalf("first read: %d opens under %q, want %d: %+v", opened, opener, conns, first.ByNetns[ns.Inode])
	}
	time.Sleep(200 * time.Millisecond) // the FINs on loopback
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	peerCloses := 0
	for _, f := range r.ByNetns[ns.Inode] {
		t.Logf("%+v", f)
		if f.PeerCloses == 0 {
			continue
		}
		if f.Comm != opener {
			t.Errorf("peer closes counted under %q, want the opener %q", f.Comm, opener)
		}
		peerCloses += int(f.PeerCloses)
	}
	if peerCloses != conns {
		t.Errorf("%d peer closes, want %d", peerCloses, conns)
	}
}

// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestFaithfulAgainstSS builds, in a namespace of its own, a listener with
// backlog 50, a connected pair whose sender pinned SO_SNDBUF to 16K and
// is stalled by a reader that never reads, and TIME_WAIT sockets; then it
// checks what we collect against `ss -tinme` for the same sockets.
func TestFaithfulAgainstSS(t *testing.T) {
	ns := testns.New(t, "faith")
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	var lnPort, pairPort int
	err := netns.Do(ns, func() error {
		// Listener with backlog 50, never accepting.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		closers = append(closers, func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(fd, 50); err != nil {
			return err
		}
		sa, _ := unix.Getsockname(fd)
		lnPort = sa.(*unix.SockaddrInet4).Port

		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		closers = append(closers, func() { ln.Close() })
		pairPort = ln.Addr().(*net.TCPAddr).Port
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 16384) })
			return serr
		}}
		sender, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		closers = append(closers, func() { sender.Close() })
		recv, err := ln.Accept()
		if err != nil {
			return err
		}
		closers = append(closers, func() { recv.Close() })
		// Fill the pipe: the receiver never reads, so the queues settle.
		go func() {
			buf := make([]byte, 64<<10)
			sender.SetWriteDeadline(time.Now().Add(3 * time.Second))
			for {
				if _, err := sender.Write(buf); err != nil {
					return
				}
			}
		}()
		// TIME_WAIT: the client closes first, five times.
		for i := 0; i < 5; i++ {
			c, s, err := testns.DialAccept(ln)
			if err != nil {
				return err
			}
			c.Close()
			time.Sleep(20 * time.Millisecond)
			s.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the stalled pair settle

	c := &Collector{Opts: Options{Owners: true}, Now: time.Now}
	snaps := c.Collect([]netns.NS{ns})
	if len(snaps) != 1 {
		t.Fatalf("got %d snapshots", len(snaps))
	}
	s := snaps[0]
	for _, er := range s.Errors {
		// Some hosts have processes even root cannot read (a sandbox's
		// pid 1): a partial owner scan is reported, and ours are still found.
		if er.Source != snapshot.SourceOwners {
			t.Errorf("source error: %+v", er)
		}
	}
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "ss", "-tinmeOaH").Output()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, out)
	}
	want := parseSS(t, string(out))
	got := map[string]*snapshot.Socket{}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		got[ssKey(sk.State.String(), sk.Local.String(), peer(sk))] = sk
	}
	if len(got) != len(want) {
		t.Errorf("we see %d sockets, ss sees %d\nss:\n%s", len(got), len(want), out)
	}
	var states = map[snapshot.State]int{}
	for k, w := range want {
		sk := got[k]
		if sk == nil {
			t.Errorf("ss shows %s, we do not", k)
			continue
		}
		states[sk.State]++
		check := func(field string, ours uint64) {
			if v, ok := w[field]; ok {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Errorf("%s: ss %s=%q", k, field, v)
				} else if n != ours {
					t.Errorf("%s: %s ours %d, ss %d", k, field, ours, n)
				}
			}
		}
		check("recvq", uint64(sk.RecvQ))
		check("sendq", uint64(sk.SendQ))
		check("ino", uint64(sk.Inode))
		if v, ok := w["sk"]; ok {
			if ck, err := strconv.ParseUint(v, 16, 64); err != nil || ck != sk.Cookie {
				t.Errorf("%s: cookie ours %x, ss %s", k, sk.Cookie, v)
			}
		}
		if sk.Mem != nil {
			check("rb", uint64(sk.Mem.Rcvbuf))
			check("tb", uint64(sk.Mem.Sndbuf))
			check("r", uint64(sk.Mem.RmemAlloc))
		}
		if ti := sk.TCP(new(snapshot.TCPInfo)); ti != nil && sk.State == snapshot.Established {
			check("cwnd", uint64(ti.SndCwnd))
			check("mss", uint64(ti.SndMSS))
			check("rcvmss", uint64(ti.RcvMSS))
			if sk.CC.String() != w["cc"] {
				t.Errorf("%s: cc ours %q, ss %q", k, sk.CC, w["cc"])
			}
		}
	}
	if states[snapshot.Listen] != 2 || states[snapshot.Established] != 2 || states[snapshot.TimeWait] != 5 {
		t.Errorf("states: %v, want 2 listeners, 2 established, 5 time-wait", states)
	}
	// The pinned listener and sender, as the test built them.
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen && int(sk.Local.Port()) == lnPort && sk.SendQ != 50 {
			t.Errorf("backlog-50 listener has Send-Q %d", sk.SendQ)
		}
		if sk.State == snapshot.Established && int(sk.Remote.Port()) == pairPort {
			if sk.Mem == nil || sk.Mem.Sndbuf != 32768 {
				t.Errorf("pinned sender: mem %+v, want sndbuf 32768 (2 x 16K)", sk.Mem)
			}
			if sk.Pids.Len() == 0 {
				t.Errorf("pinned sender: no owner found")
			}
		}
	}
}

func peer(sk *snapshot.Socket) string {
	if sk.State == snapshot.Listen {
		if sk.Family == unix.AF_INET6 {
			return "[::]:*"
		}
		return "0.0.0.0:*"
	}
	return sk.Remote.String()
}

func ssKey(state, local, remote string) string { return state + " " + local + " " + remote }

// parseSS reads `ss -tinmeOaH`: one socket a line, then key:value tokens.
func parseSS(t *testing.T, out string) map[string]map[string]string {
	res := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := map[string]string{"recvq": f[1], "sendq": f[2]}
		for _, tok := range f[5:] {
			switch {
			case strings.HasPrefix(tok, "skmem:("):
				for _, kv := range strings.Split(strings.Trim(tok[len("skmem:("):], ")"), ",") {
					i := strings.IndexAny(kv, "0123456789")
					if i > 0 {
						m[kv[:i]] = kv[i:]
					}
				}
			case tok == "cubic" || tok == "bbr" || tok == "reno":
				m["cc"] = tok
			case strings.Contains(tok, ":"):
				i := strings.Index(tok, ":")
				m[tok[:i]] = tok[i+1:]
			}
		}
		if f[0] == "LISTEN" {
			f[4] = "0.0.0.0:*"
		}
		key := ssKey(f[0], f[3], f[4])
		if _, dup := res[key]; dup {
			t.Fatalf("ss line repeats %s", key)
		}
		res[key] = m
	}
	return res
}

// TestBufLockProbe: an idle connection whose receiver pinned SO_RCVBUF
// is probed too (it throttles its peer without holding data), and the
// probe tells the pinned end from the autotuned one.
func TestBufLockProbe(t *testing.T) {
	ns := testns.New(t, "buflock")
	var ln net.Listener
	var cl, sv net.Conn
	t.Cleanup(func() {
		for _, c := range []interface{ Close() error }{ln, cl, sv} {
			if c != nil {
				c.Close()
			}
		}
	})
	err := netns.Do(ns, func() (err error) {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 32768) })
			return serr
		}}
		if ln, err = lc.Listen(context.Background(), "tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		if cl, err = net.Dial("tcp4", ln.Addr().String()); err != nil {
			return err
		}
		sv, err = ln.Accept()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Opts: Options{Owners: true, BufLock: true}, Now: time.Now}
	s := c.Collect([]netns.NS{ns})[0]
	port := ln.Addr().(*net.TCPAddr).Port
	var server, client *snapshot.Socket
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		if int(sk.Local.Port()) == port {
			server = sk
		} else {
			client = sk
		}
	}
	if server == nil || client == nil {
		t.Fatalf("pair not found: %+v", s.Sockets)
	}
	if !server.BufLock.Known() || server.BufLock.Bits()&2 == 0 {
		t.Errorf("pinned receiver: buf_lock %v, want bit 1 (SO_RCVBUF) set; errors %+v", server.BufLock, s.Errors)
	}
	if client.BufLock.Known() && client.BufLock.Bits() != 0 {
		t.Errorf("autotuned client: buf_lock %d, want 0", client.BufLock.Bits())
	}
}

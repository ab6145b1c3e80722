// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var update = flag.Bool("update", false, "recapture testdata/*.hex and *.ss from a live namespace (needs root)")

// captures names the fixtures: a dump of each family and ss's view of it.
var captures = []struct {
	name   string
	family uint8
	ssFlag string
}{
	{"inet", unix.AF_INET, "-4"},
	{"inet6", unix.AF_INET6, "-6"},
}

// TestCapture regenerates the fixtures: go test -run TestCapture -update
// as root. The scenario is build's: listeners with backlog 50, pairs over
// 127.0.0.1, [::1] and v4-mapped, a half-closed pair, TIME-WAITs, a
// non-empty accept queue and a SYN-RECV request socket.
func TestCapture(t *testing.T) {
	if !*update {
		t.Skip("run with -update as root to recapture testdata")
	}
	ns := newNetns(t)
	f := newFDs(t)
	ns.do(func() { build(t, f) })
	eventually(t, "states to settle", func() bool {
		n := 0
		for _, s := range dumpAll(t, ns, Options{}) {
			if s.State == snapshot.TimeWait || s.State == snapshot.FinWait2 {
				n++
			}
		}
		return n == 4
	})
	time.Sleep(300 * time.Millisecond) // let delayed ACKs go out
	uname := kernelRelease()
	for _, c := range captures {
		var dgrams [][]byte
		var err error
		seq := uint32(1)
		ns.do(func() { dgrams, err = captureRaw(c.family, seq) })
		if err != nil {
			t.Fatalf("capture %s: %v", c.name, err)
		}
		ss, err := exec.Command("ip", "netns", "exec", ns.name, "ss", "-H", "-t", "-a", "-i", "-n", "-m", "-e", c.ssFlag).Output()
		if err != nil {
			t.Fatalf("ss: %v", err)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# sock_diag TCP dump, %s, INFO|CONG|SKMEMINFO, Linux %s\n", familyName(c.family), uname)
		fmt.Fprintf(&b, "# regenerate: go test ./internal/sockdiag -run TestCapture -update (root)\n")
		fmt.Fprintf(&b, "# seq %d\n", seq)
		for i, d := range dgrams {
			fmt.Fprintf(&b, "# datagram %d, %d bytes\n", i+1, len(d))
			for off := 0; off < len(d); off += 16 {
				end := min(off+16, len(d))
				fmt.Fprintf(&b, "%04x  % x\n", off, d[off:end])
			}
		}
		base := filepath.Join("testdata", "dump_"+c.name)
		if err := os.WriteFile(base+".hex", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(base+".ss", ss, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// captureRaw dumps one family and returns the datagrams as received.
func captureRaw(family uint8, seq uint32) ([][]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	req := request(family, seq, Options{Info: true, Mem: true}, nil)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	buf := make([]byte, recvBufLen)
	var out [][]byte
	for {
		n, err := recvTrunc(fd, buf)
		if err != nil {
			return nil, err
		}
		d := bytes.Clone(buf[:n])
		out = append(out, d)
		done, err := parseDump(d, seq, 0, func(*snapshot.Socket) error { return nil })
		if err != nil || done {
			return out, err
		}
	}
}

// readHex reads a fixture written by TestCapture: its seq and datagrams.
func readHex(t testing.TB, path string) (uint32, [][]byte) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var seq uint32
	var out [][]byte
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# seq "):
			v, err := strconv.ParseUint(strings.TrimPrefix(line, "# seq "), 10, 32)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			seq = uint32(v)
		case strings.HasPrefix(line, "# datagram "):
			out = append(out, nil)
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			f := strings.Fields(line)
			if len(out) == 0 || len(f) < 2 {
				t.Fatalf("%s: stray line %q", path, line)
			}
			b, err := hex.DecodeString(strings.Join(f[1:], ""))
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			out[len(out)-1] = append(out[len(out)-1], b...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return seq, out
}

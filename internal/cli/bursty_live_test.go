// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestCheckTraceAgreeBursty (root): a sender that writes 4 MB and sleeps
// 1 s into a loopback receiver pinned at SO_RCVBUF 2048 (issue 38). check
// names it rwnd-limited at warning in each of three 2 s windows, and
// trace calls each of its transfers slow, held by the peer's receive
// window, with one verdict for the connection: the two agree.
//
// It runs only with TCPDOCTOR_BURSTY=1: what the kernel says of this flow
// depends on the host's load. On a loaded host (load average 15-30) the
// chronographs give the 2K window most of the busy time and both commands
// name it; on a quiet one each 4 MB burst takes 70-90 ms, tcp_info calls
// 77-80 % of the busy time cwnd-limited and 20-23 % rwnd-limited (loopback
// and a veth alike), and rwnd-limited's 30 % threshold is not crossed in
// some windows while it is in others. Until the rule judges such a flow
// the same way on both, this test would fail CI by the host's mood.
func TestCheckTraceAgreeBursty(t *testing.T) {
	testns.NeedRoot(t)
	if os.Getenv("TCPDOCTOR_BURSTY") != "1" {
		t.Skip("TCPDOCTOR_BURSTY=1 runs it: its verdict depends on the host's load (see the comment)")
	}
	ns := testns.New(t, "bursty")
	var ln net.Listener
	var cli, srv net.Conn
	err := netns.Do(ns, func() error {
		var err error
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048)
			}); err != nil {
				return err
			}
			return serr
		}}
		if cli, err = d.Dial("tcp4", ln.Addr().String()); err != nil {
			return err
		}
		srv, err = ln.Accept()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer cli.Close()
	defer srv.Close()
	port := srv.LocalAddr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { // the reader, prompt
		buf := make([]byte, 64<<10)
		for {
			if _, err := cli.Read(buf); err != nil {
				return
			}
		}
	}()
	go func() { // the bursty writer
		buf := make([]byte, 4<<20)
		for ctx.Err() == nil {
			if _, err := srv.Write(buf); err != nil {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	local := srv.LocalAddr().String()
	for i := range 3 {
		code, out, stderr := run(t, "check", "--netns", ns.Name, "--interval", "2s", "--rule", "rwnd-limited", "--json")
		var rep struct {
			Findings []struct {
				Rule, Severity string
				Subject        struct{ Local string }
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("check %d: exit %d, %v: %s %s", i+1, code, err, out, stderr)
		}
		found := false
		for _, f := range rep.Findings {
			if f.Rule == "rwnd-limited" && f.Subject.Local == local {
				found = true
				if f.Severity != "warning" {
					t.Errorf("check %d: rwnd-limited %s, want warning", i+1, f.Severity)
				}
			}
		}
		if !found {
			t.Errorf("check %d: no rwnd-limited finding for %s: %s", i+1, local, out)
		}
	}
	code, out, stderr := run(t, "trace", "--netns", ns.Name, "--port", strconv.Itoa(port), "--duration", "4s", "--bpf", "off", "--json")
	if code != ExitFindings {
		t.Fatalf("trace: exit %d, want %d (slow transfers): %s", code, ExitFindings, stderr)
	}
	sends, lines := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var tr struct {
			Local, Dir string
			Bytes      int
			Clipped    bool
			Verdict    struct {
				Slow     bool
				HeldBy   string `json:"held_by"`
				ConnLine string `json:"conn_line"`
			}
		}
		if err := json.Unmarshal([]byte(l), &tr); err != nil {
			t.Fatalf("trace line %q: %v", l, err)
		}
		if tr.Local != local || tr.Dir != "send" || tr.Clipped || tr.Bytes < 1<<20 {
			continue
		}
		sends++
		if !tr.Verdict.Slow || tr.Verdict.HeldBy != "peer's receive window" {
			t.Errorf("trace: a %d-byte transfer slow %v held by %q, want slow, the peer's receive window", tr.Bytes, tr.Verdict.Slow, tr.Verdict.HeldBy)
		}
		if tr.Verdict.ConnLine != "" {
			lines++
		}
	}
	if sends < 2 || lines != 1 {
		t.Errorf("trace: %d whole bursts, %d connection verdicts; want at least 2 and exactly 1", sends, lines)
	}
}

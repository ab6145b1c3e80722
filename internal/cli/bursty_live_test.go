// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
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
// names it rwnd-limited at warning in three 2 s windows (two at least,
// with both CPUs busy), and trace calls each burst it judges slow, most
// of them held by the peer's receive window, with one verdict for the
// connection naming the window: the two agree.
//
// What the kernel's chronographs say of this flow depends on the host's
// load: loaded, they give the 2K window most of the busy time; quiet, a
// burst takes 70-90 ms and tcp_info calls only 20-23 % of it
// rwnd-limited (bbr's pacing is counted busy). The truth is the window:
// 2K against a cwnd of about 200K in every sample, so cwnd never binds.
// rwnd-limited judges it so (the window under cwnd in both samples, with
// rwnd_limited >= 10 % of busy time), and counts a window busy 50 ms or
// more, which one burst always is (docs/rules/rwnd-limited.md says the
// margins). Each check's figures are logged.
//
// Both commands run as processes of their own, as users run them: their
// collection shares no Go runtime with the test's reader and writer.
// Both are told the path (--bandwidth 10gbit: loopback carries tens of
// Gbit/s). Without it they judge against the 1 Gbit/s reference, and how
// fast a host's CPUs turn a 2K window over decides the verdict: bursts
// took 70-90 ms here (under half the reference: slow) and 62 ms in CI
// (540 Mbit/s: not slow, to check and trace alike).
func TestCheckTraceAgreeBursty(t *testing.T) {
	testns.NeedRoot(t)
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
	missed := 0
	for i := range 3 {
		code, out, stderr := runProcess(t, "check", "--netns", ns.Name, "--interval", "2s", "--rule", "rwnd-limited", "--bandwidth", "10gbit", "--json")
		var rep struct {
			Findings []struct {
				Rule, Severity string
				Subject        struct{ Local string }
				Evidence       []struct{ Name, Value string }
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("check %d: exit %d, %v: %s %s", i+1, code, err, out, stderr)
		}
		found := false
		for _, f := range rep.Findings {
			if f.Rule == "rwnd-limited" && f.Subject.Local == local {
				found = true
				var ev []string
				for _, e := range f.Evidence {
					if e.Name == "rwnd_limited" || e.Name == "this transfer" || e.Name == "window is the limit" || e.Name == "performance" {
						ev = append(ev, e.Name+" = "+e.Value)
					}
				}
				t.Logf("check %d: %s; %s", i+1, f.Severity, strings.Join(ev, " | "))
				if f.Severity != "warning" {
					t.Errorf("check %d: rwnd-limited %s, want warning", i+1, f.Severity)
				}
			}
		}
		if !found {
			missed++
			ss, _ := exec.Command("ip", "netns", "exec", ns.Name, "ss", "-tinm").CombinedOutput()
			t.Logf("check %d: no rwnd-limited finding for %s: %s\nss after it:\n%s", i+1, local, out, ss)
		}
	}
	// Every finding is a warning. With both CPUs busy, 35 of 36 windows
	// had one (the other no finding at all): one window of three may go
	// without, never two.
	if missed > 1 {
		t.Errorf("%d of 3 check windows without the rwnd-limited finding, want at most 1", missed)
	}
	// Six seconds hold at least two whole bursts of a 1.1-1.6 s cycle.
	code, out, stderr := runProcess(t, "trace", "--netns", ns.Name, "--port", strconv.Itoa(port), "--duration", "6s", "--bpf", "off", "--bandwidth", "10gbit", "--json")
	if code != ExitFindings {
		t.Fatalf("trace: exit %d, want %d (slow transfers): %s", code, ExitFindings, stderr)
	}
	// One verdict for the connection, on whichever of its transfers lost
	// the most (clipped ones too), naming the window; each whole burst
	// is slow against the stated path and held by the window, as check
	// judged the windows (tcpmodel.Path.Judge).
	sends, slow, byWnd, lines := 0, 0, 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var tr struct {
			Local, Dir string
			Bytes      int
			Clipped    bool
			Uncertain  bool
			Samples    int
			Dur        time.Duration `json:"duration_ns"`
			Verdict    struct {
				Slow     bool
				HeldBy   string `json:"held_by"`
				ConnLine string `json:"conn_line"`
			}
		}
		if err := json.Unmarshal([]byte(l), &tr); err != nil {
			t.Fatalf("trace line %q: %v", l, err)
		}
		if tr.Local != local || tr.Dir != "send" {
			continue
		}
		if tr.Verdict.ConnLine != "" {
			lines++
			t.Logf("trace: %s", tr.Verdict.ConnLine)
			if !strings.Contains(tr.Verdict.ConnLine, "waiting for the peer's receive window") {
				t.Errorf("trace's verdict on the connection does not name the receive window: %s", tr.Verdict.ConnLine)
			}
		}
		if tr.Clipped || tr.Bytes < 1<<20 {
			continue
		}
		t.Logf("trace: %d bytes in %v (%.0f Mbit/s) over %d samples, uncertain %v, slow %v, held by %q", tr.Bytes, tr.Dur, float64(tr.Bytes)*8/tr.Dur.Seconds()/1e6, tr.Samples, tr.Uncertain, tr.Verdict.Slow, tr.Verdict.HeldBy)
		if tr.Uncertain || tr.Samples < 3 {
			continue // trace judges neither (docs/trace.md: uncertain; minimum slow)
		}
		sends++
		if tr.Verdict.Slow {
			slow++
			if tr.Verdict.HeldBy == "peer's receive window" {
				byWnd++
			}
		}
	}
	if sends < 2 || slow != sends || lines != 1 {
		t.Errorf("trace: %d whole bursts judged, %d slow, %d connection verdicts; want at least 2, all slow, exactly 1 verdict", sends, slow, lines)
	}
	// Each burst's holder comes from its own few samples: with both CPUs
	// busy, about one in ten had no sample that showed the window bound
	// (its samples at the burst's edges, or a late one), its time left to
	// congestion. The connection's verdict, said above,
	// weighs them all; most bursts name the window on their own.
	if 2*byWnd <= slow {
		t.Errorf("trace: %d of %d slow bursts held by the peer's receive window, want most", byWnd, slow)
	}
}

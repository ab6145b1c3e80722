// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// slowReader makes, in ns, a connection on 127.0.0.1 whose receiver
// pinned SO_RCVBUF 32K and reads 4K every 50 ms while the sender writes
// as fast as the window lets it: the receiver's queue stays full and its
// window closed (slow-reader), the sender waits on the window
// (rwnd-limited). The sender stops after 64 MiB; both ends are shut down
// and closed when the test ends. It returns the receiver's address.
func slowReader(t *testing.T, ns netns.NS) string {
	t.Helper()
	var lfd, cfd, sfd int
	var addr string
	err := netns.Do(ns, func() error {
		var err error
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_RCVBUF, 32<<10); err != nil {
			return err
		}
		if err = unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err = unix.Listen(lfd, 4); err != nil {
			return err
		}
		sa, err := unix.Getsockname(lfd)
		if err != nil {
			return err
		}
		port := sa.(*unix.SockaddrInet4).Port
		addr = "127.0.0.1:" + strconv.Itoa(port)
		if cfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.Connect(cfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
			return err
		}
		sfd, _, err = unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the sender: at most 64 MiB
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for sent := 0; sent < 64<<20; {
			n, err := unix.Write(cfd, buf)
			if err != nil {
				return
			}
			sent += n
		}
	}()
	go func() { // the slow reader
		defer wg.Done()
		buf := make([]byte, 4<<10)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if n, err := unix.Read(sfd, buf); err != nil || n == 0 {
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		for _, fd := range []int{cfd, sfd} {
			_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		}
		wg.Wait()
		for _, fd := range []int{cfd, sfd, lfd} {
			unix.Close(fd)
		}
	})
	return addr
}

// cpuTicks is a process's user and system CPU time, all threads, in
// clock ticks (/proc/PID/stat fields 14 and 15).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return u + k
}

// costSpan is the fixed span over which serve's CPU is measured, from its
// start: the trigger window and the default 5 s trace fit, on a busy
// machine too.
const costSpan = 15 * time.Second

// serveCPU runs serve --history on ns with args for costSpan and returns
// its CPU seconds over that span; then, with wait, until it has kept a
// trace (at most 60 s more). It returns serve's last scrape and its log;
// serve is stopped after.
func serveCPU(t *testing.T, dir string, ns netns.NS, wait bool, args ...string) (float64, string, string) {
	t.Helper()
	serve, url, stderr := serveChild(t, append([]string{"--netns", ns.Name, "--interval", "1s", "--history", dir}, args...)...)
	c0 := cpuTicks(t, serve.Process.Pid)
	time.Sleep(costSpan)
	c1 := cpuTicks(t, serve.Process.Pid)
	body := scrapeBody(t, url)
	for end := time.Now().Add(60 * time.Second); wait && metricValue(body, "tcpdoctor_history_traces_total") < 1 && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
		body = scrapeBody(t, url)
	}
	stopChild(t, serve, syscall.SIGTERM)
	return float64(c1-c0) / 100, body, stderr.String() // USER_HZ is 100 on Linux
}

// TestHistoryLiveTrace: serve --history on a namespace of the test's own
// in which a receiver with a 32K SO_RCVBUF reads slowly. Its slow-reader
// (or its sender's rwnd-limited) warning starts a triggered trace of
// that connection, kept in the store; history lists it with the command
// that shows it, which renders the connection, and history --html links
// its page. It also prints what the trace costs: serve's CPU seconds
// over the same 15 s with triggered traces and with none
// (--history-traces-per-hour 0), docs/performance-history.md "History".
func TestHistoryLiveTrace(t *testing.T) {
	testns.NeedRoot(t)
	ns := testns.New(t, "htrace")
	recv := slowReader(t, ns)
	time.Sleep(500 * time.Millisecond)

	dir := filepath.Join(t.TempDir(), "history")
	withCPU, body, log := serveCPU(t, dir, ns, true)
	if v := metricValue(body, "tcpdoctor_history_traces_total"); v < 1 {
		_, h, _ := run(t, "history", "--history", dir, "--since", "1h", "-v")
		t.Fatalf("tcpdoctor_history_traces_total %v after %s and 60s more\n%s\n%s", v, costSpan, log, h)
	}
	if v := metricValue(body, "tcpdoctor_history_errors_total"); v != 0 {
		t.Errorf("tcpdoctor_history_errors_total %v\n%s", v, log)
	}
	traces, _ := filepath.Glob(filepath.Join(dir, "trace-*.jsonl.gz"))
	quietDir := filepath.Join(t.TempDir(), "history")
	withoutCPU, qbody, _ := serveCPU(t, quietDir, ns, false, "--history-traces-per-hour", "0")
	if v := metricValue(qbody, "tcpdoctor_history_traces_total"); v != 0 {
		t.Errorf("--history-traces-per-hour 0: %v traces", v)
	}
	if m := regexp.MustCompile(`history: traced .*`).FindString(log); m != "" {
		t.Logf("serve's log: %s", m)
	} else {
		t.Errorf("serve did not log its trace:\n%s", log)
	}
	// sock_diag dumps walk the kernel's TCP tables, which every namespace
	// shares: their cost depends on the sockets of the whole host.
	if b, err := os.ReadFile("/proc/net/sockstat"); err == nil {
		if m := regexp.MustCompile(`TCP: .*alloc (\d+)`).FindStringSubmatch(string(b)); m != nil {
			t.Logf("TCP sockets allocated on the host (every namespace, /proc/net/sockstat): %s", m[1])
		}
	}
	t.Logf("serve CPU over %s (interval 1s, one connection traced, %d trace(s) of 5s at 100 samples/s): %.2f s with triggered traces, %.2f s without; the traces cost %.2f CPU seconds",
		costSpan, len(traces), withCPU, withoutCPU, withCPU-withoutCPU)

	var l history.Listing
	out := mustRun(t, 0, "history", "--history", dir, "--since", "1h", "--json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	k := -1
	for i, in := range l.Incidents {
		if in.Trace != "" {
			k = i
			break
		}
	}
	if k < 0 {
		t.Fatalf("no incident names a trace:\n%s\nserve:\n%s", out, log)
	}
	in := l.Incidents[k]
	if in.Rule != "slow-reader" && in.Rule != "rwnd-limited" || in.Subject.Netns != ns.Name ||
		(in.Subject.Local.String() != recv && in.Subject.Remote.String() != recv) || l.TraceReplay[k] == "" {
		t.Errorf("incident %+v (receiver %s), trace command %q", in, recv, l.TraceReplay[k])
	}
	text := mustRun(t, 0, "history", "--history", dir, "--since", "1h")
	if !strings.Contains(text, "  trace: "+l.TraceReplay[k]) {
		t.Errorf("history's text lacks the trace command:\n%s", text)
	}
	// The command replays the recording: the connection, sampled.
	work := t.TempDir()
	argv := strings.Fields(strings.TrimPrefix(l.TraceReplay[k], "tcpdoctor "))
	argv[len(argv)-1] = filepath.Join(work, argv[len(argv)-1])
	code, tout, terr := run(t, argv...)
	if code != 0 && code != ExitFindings {
		t.Fatalf("%v: exit %d: %s", argv, code, terr)
	}
	tr, err := trace.ReadFile(filepath.Join(dir, in.Trace))
	if err != nil || len(tr.Conns) == 0 || tr.Header.Netns != ns.Name {
		t.Fatalf("%s: %v %+v", in.Trace, err, tr)
	}
	c := tr.Conns[0]
	if c.Local.String() != in.Subject.Local.String() || len(c.Points) < 100 {
		t.Errorf("traced %s -> %s, %d points; the finding's connection is %s -> %s", c.Local, c.Remote, len(c.Points), in.Subject.Local.String(), in.Subject.Remote.String())
	}
	page, err := os.ReadFile(argv[len(argv)-1])
	if err != nil || !strings.Contains(string(page), c.Local.String()) {
		t.Errorf("the trace page does not name %s: %v", c.Local, err)
	}
	hp := filepath.Join(work, "night.html")
	mustRun(t, 0, "history", "--history", dir, "--since", "1h", "--html", hp)
	link := "night-" + strings.TrimSuffix(in.Trace, ".jsonl.gz") + ".html"
	if b, err := os.ReadFile(hp); err != nil || !strings.Contains(string(b), `href="`+link+`"`) {
		t.Errorf("history --html does not link %s: %v", link, err)
	}
	if _, err := os.Stat(filepath.Join(work, link)); err != nil {
		t.Errorf("the linked page: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, in.Trace))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trace %s: %d bytes, %d connection(s), %d points of %s -> %s; trace --from prints:\n%s", in.Trace, st.Size(), len(tr.Conns), len(c.Points), c.Local, c.Remote, tout)
}

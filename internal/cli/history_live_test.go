// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// serveChild runs `tcpdoctor serve args` as a child process (this test
// binary, TestMain) and returns it with its metrics URL once it serves.
// It is stopped by its PID when the test ends (SIGTERM, then SIGKILL).
func serveChild(t *testing.T, args ...string) (*exec.Cmd, string, *testns.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(append([]string{"serve", "--listen", "127.0.0.1:0", "--bpf", "off"}, args...), "\x1f"))
	stderr := &testns.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	re := regexp.MustCompile(`serving (http://[0-9.:]+/metrics)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return cmd, m[1], stderr
		}
		select {
		case <-done:
			t.Fatalf("serve exited:\n%s", stderr.String())
		default:
		}
	}
	t.Fatalf("serve did not start:\n%s", stderr.String())
	return nil, "", nil
}

// stopChild ends a child serve with sig and waits for it.
func stopChild(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	_ = cmd.Process.Signal(sig)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		var ws unix.WaitStatus
		if pid, _ := unix.Wait4(cmd.Process.Pid, &ws, unix.WNOHANG, nil); pid == cmd.Process.Pid {
			return
		}
	}
	t.Fatalf("serve %d did not stop on %v", cmd.Process.Pid, sig)
}

func scrapeBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// metricValue is the value of an unlabelled family in a scrape, -1 when
// absent.
func metricValue(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+]+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// connectBurst fires a non-blocking connect at addr from inside ns every
// 50 ms for d and returns a function closing them all.
func connectBurst(t *testing.T, ns netns.NS, port int, d time.Duration) (closeAll func()) {
	t.Helper()
	var fds []int
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		err := netns.Do(ns, func() error {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			err = unix.Connect(c, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port})
			if err != nil && err != unix.EINPROGRESS {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var once sync.Once
	closeAll = func() {
		once.Do(func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		})
	}
	t.Cleanup(closeAll)
	return closeAll
}

// TestHistoryLiveBurst: serve --history watches a namespace of the test's
// own where a stock server (python3 -m http.server, backlog 5) is frozen
// (SIGSTOP) for a 10 s burst of connects that overflows its accept queue,
// then thawed. Afterwards history lists exactly that incident, with the
// listener as subject and times within a window of the burst's, and
// check --history --at prints what check --from prints for the kept file.
func TestHistoryLiveBurst(t *testing.T) {
	testns.NeedRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed (Debian package python3)")
	}
	ns := testns.New(t, "hist")
	const port = 8000
	srv := exec.Command("ip", "netns", "exec", ns.Name, py, "-u", "-c",
		// http.server's own server, its default backlog (5), told to say when it listens.
		"import http.server as h,sys\ns=h.HTTPServer(('127.0.0.1',8000),h.SimpleHTTPRequestHandler)\nprint('ready',flush=True)\nsys.stdin.close()\ns.serve_forever()")
	srv.Dir = t.TempDir()
	if line, err := testns.Child(t, srv); err != nil || line != "ready" {
		t.Fatalf("python3 http.server: %q %v", line, err)
	}
	dir := filepath.Join(t.TempDir(), "history")
	const interval = time.Second
	serve, _, stderr := serveChild(t, "--netns", ns.Name, "--interval", interval.String(), "--history", dir)
	time.Sleep(3 * interval) // quiet windows first

	t0 := time.Now()
	_ = srv.Process.Signal(syscall.SIGSTOP) // ip netns exec execs python3: the same pid
	closeAll := connectBurst(t, ns, port, 8*time.Second)
	t1 := time.Now()
	closeAll()
	_ = srv.Process.Signal(syscall.SIGCONT)
	time.Sleep(4 * interval)
	stopChild(t, serve, syscall.SIGTERM)

	in, replay := burstIncident(t, dir, "listen-overflow", t0, t1, stderr.String())
	if in.Subject.Netns != ns.Name || in.Subject.Local.String() != "127.0.0.1:8000" || !strings.HasPrefix(in.Subject.Command, "python3") {
		t.Errorf("subject %+v", in.Subject)
	}
	replaysAsFrom(t, dir, in, replay, interval, t0, t1, "listen-overflow", "127.0.0.1:8000")
	// The time an alert names is anywhere in the burst, not the window
	// kept: the burst's middle gives the incident's critical finding and
	// check's exit code, and says which window it shows.
	if in.Severity != diag.Critical {
		t.Errorf("the burst's incident peaks at %v, want critical", in.Severity)
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	for _, args := range [][]string{
		{"check", "--history", dir, "--at", mid.Format(time.RFC3339Nano)},
		{"check", "--history", dir, "--at", mid.Format(time.RFC3339)}, // whole seconds, as an alert says it
	} {
		code, out, errs := run(t, args...)
		t.Logf("%v: exit %d\n%s%s", args, code, errs, out)
		if code != ExitFindings || !regexp.MustCompile(`(?m)^CRIT +listen-overflow`).MatchString(out) || !strings.Contains(out, "127.0.0.1:8000") {
			t.Errorf("%v: exit %d, want 1 and the critical listen-overflow finding:\n%s\nstderr:\n%s", args, code, out, errs)
		}
		if !strings.Contains(errs, "replaying the window") || !strings.Contains(errs, "the incident covering it: CRIT listen-overflow") {
			t.Errorf("%v: stderr does not say the window and the incident:\n%s", args, errs)
		}
	}
}

// burstIncident lists dir's incidents since a minute before the burst t0
// and returns the one of rule, with its replay command; the test fails
// unless there is exactly one.
func burstIncident(t *testing.T, dir, rule string, t0, t1 time.Time, serveLog string) (history.Incident, string) {
	t.Helper()
	out := mustRun(t, 0, "history", "--history", dir, "--since", t0.Add(-time.Minute).Format(time.RFC3339), "--json")
	var l history.Listing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	var got []history.Incident
	var replay string
	for i, in := range l.Incidents {
		if in.Rule == rule {
			got = append(got, in)
			replay = l.Replay[i]
		}
	}
	t.Logf("burst %s .. %s; history: %s", t0.Format("15:04:05.000"), t1.Format("15:04:05.000"), out)
	if len(got) != 1 {
		t.Fatalf("%d %s incidents, want 1:\n%s\nserve:\n%s", len(got), rule, out, serveLog)
	}
	return got[0], replay
}

// replaysAsFrom checks that incident in spans the burst t0..t1 within a
// window of serve's interval, and that its replay command finds what
// wants says and prints byte for byte what check --from prints of the
// evidence it names.
func replaysAsFrom(t *testing.T, dir string, in history.Incident, replay string, interval time.Duration, t0, t1 time.Time, wants ...string) {
	t.Helper()
	slack := interval + 500*time.Millisecond // a window, and collection time
	if in.Start.Before(t0.Add(-slack)) || in.Start.After(t0.Add(slack)) || in.End.Before(t1.Add(-slack)) || in.End.After(t1.Add(3*slack)) || in.Ongoing {
		t.Errorf("incident %s .. %s (ongoing %v), burst %s .. %s", in.Start, in.End, in.Ongoing, t0, t1)
	}
	if replay == "" {
		t.Fatal("no replay command")
	}
	argv := strings.Fields(strings.TrimPrefix(replay, "tcpdoctor "))
	code, got1, _ := run(t, argv...)
	for _, w := range wants {
		if code != ExitFindings || !strings.Contains(got1, w) {
			t.Errorf("%s: exit %d, want %q in:\n%s", replay, code, w, got1)
		}
	}
	_, want, _ := run(t, "check", "--from", filepath.Join(dir, in.Evidence))
	if got1 != want {
		t.Errorf("check --at differs from check --from of its file:\n%s\nwant\n%s", got1, want)
	}
}

// segments maps each timeline segment of dir to its contents' hash.
func segments(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "timeline-*"))
	out := map[string][32]byte{}
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = sha256.Sum256(b)
	}
	return out
}

// TestHistoryKill9: serve --history killed with SIGKILL while it writes
// (a window every 100 ms, a segment every few dozen windows) leaves every
// segment but the open one whole and closed; restarted on the same
// directory it starts a new segment and leaves the older ones byte for
// byte as they were.
func TestHistoryKill9(t *testing.T) {
	ns := testns.New(t, "hkill")
	dir := filepath.Join(t.TempDir(), "history")
	t.Setenv(childSegment, "500ms") // a segment every few windows
	args := []string{"--netns", ns.Name, "--interval", "100ms", "--history", dir, "--no-owners"}
	serve, _, _ := serveChild(t, args...)
	time.Sleep(4 * time.Second)
	stopChild(t, serve, syscall.SIGKILL)
	before := segments(t, dir)
	if len(before) < 3 {
		t.Fatalf("%d segments after 4 s at 100 ms windows", len(before))
	}
	names := sortedKeys(before)
	newest := names[len(names)-1]
	count := func(name string) (int, error) {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		n := 0
		err = history.ReadSegment(f, func(*history.Entry) error { n++; return nil })
		return n, err
	}
	for _, name := range names[:len(names)-1] {
		if n, err := count(name); err != nil || n == 0 {
			t.Errorf("%s (closed before the kill): %d entries, %v", name, n, err)
		}
	}
	killedN, killedErr := count(newest)
	t.Logf("%d segments; the one open at the kill: %d entries, %v", len(names), killedN, killedErr)

	serve, _, _ = serveChild(t, args...)
	time.Sleep(time.Second)
	stopChild(t, serve, syscall.SIGTERM)
	after := segments(t, dir)
	for _, name := range names {
		if h, ok := after[name]; ok && h != before[name] {
			t.Errorf("%s changed after the restart", name)
		}
	}
	if _, ok := after[newest]; !ok {
		t.Errorf("the segment open at the kill, %s, is gone (evicted?): %v", newest, sortedKeys(after))
	}
	if len(after) <= len(before) {
		t.Errorf("no new segment after the restart: %d then %d", len(before), len(after))
	}
	if n, _ := count(newest); n != killedN {
		t.Errorf("the killed segment reads %d entries after the restart, %d before", n, killedN)
	}
	st, err := history.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	es, err := st.Entries(time.Time{}, time.Time{})
	if err != nil || len(es) < 30 {
		t.Errorf("%d entries, %v, notes %q", len(es), err, st.Notes)
	}
}

func sortedKeys(m map[string][32]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	// names sort in time order
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestHistoryFullDisk: serve --history on a full 64 KiB tmpfs keeps
// serving metrics with fresh collections, counts the failed writes in
// tcpdoctor_history_errors_total and says so once in its log.
func TestHistoryFullDisk(t *testing.T) {
	ns := testns.New(t, "hfull")
	dir := t.TempDir()
	if err := unix.Mount("tcpdoctor-test", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	fill, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := fill.Write(chunk); err != nil {
			break // ENOSPC: full
		}
	}
	fill.Close()
	serve, url, stderr := serveChild(t, "--netns", ns.Name, "--interval", "200ms", "--history", dir, "--no-owners")
	var first, last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		last = scrapeBody(t, url)
		if first == "" {
			first = last
		}
		if metricValue(last, "tcpdoctor_history_errors_total") >= 5 && metricValue(last, "tcpdoctor_collections_total") >= metricValue(first, "tcpdoctor_collections_total")+5 {
			break
		}
	}
	errs, cols := metricValue(last, "tcpdoctor_history_errors_total"), metricValue(last, "tcpdoctor_collections_total")
	if errs < 5 || cols < metricValue(first, "tcpdoctor_collections_total")+5 || !regexp.MustCompile(`(?m)^tcpdoctor_source_up\{[^}]*netns="`+regexp.QuoteMeta(ns.Name)+`"`).MatchString(last) {
		t.Fatalf("history errors %v, collections %v (first scrape %v)", errs, cols, metricValue(first, "tcpdoctor_collections_total"))
	}
	stopChild(t, serve, syscall.SIGTERM)
	log := stderr.String()
	if n := strings.Count(log, "history:"); n != 1 || !strings.Contains(log, "no space left on device") {
		t.Errorf("serve said %d history lines:\n%s", n, log)
	}
	t.Logf("%v history errors over %v collections; log:\n%s", errs, cols, log)
}

// TestHistoryLivePortExhaustion: serve --history watches a namespace of
// the test's own whose ip_local_port_range is narrowed to 100 ports; for
// about 8 s this process holds every one of them in connections to
// 127.0.0.2:9090 (the 101st connect fails with EADDRNOTAVAIL), then
// closes them. Afterwards history lists one port-exhaustion incident
// with that destination as subject and times within a window of the
// burst's, and check --history --at prints what check --from prints for
// the kept file, the finding with it.
func TestHistoryLivePortExhaustion(t *testing.T) {
	testns.NeedRoot(t)
	ns := testns.New(t, "hport")
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40099")
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.2:9090")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		accepted []net.Conn
	)
	closeAccepted := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
		accepted = nil
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { ln.Close(); closeAccepted() })

	dir := filepath.Join(t.TempDir(), "history")
	const interval = time.Second
	serve, _, stderr := serveChild(t, "--netns", ns.Name, "--interval", interval.String(), "--history", dir)
	time.Sleep(3 * interval) // quiet windows first

	t0 := time.Now()
	var held []net.Conn
	closeHeld := func() {
		for _, c := range held {
			c.Close()
		}
		held = nil
	}
	t.Cleanup(closeHeld)
	var extra error
	if err := netns.Do(ns, func() error {
		for range 100 {
			c, err := net.DialTimeout("tcp4", "127.0.0.2:9090", time.Second)
			if err != nil {
				return err
			}
			held = append(held, c)
		}
		c, err := net.DialTimeout("tcp4", "127.0.0.2:9090", time.Second)
		if err == nil {
			c.Close()
		}
		extra = err
		return nil
	}); err != nil {
		t.Fatalf("holding the namespace's 100 ports: %v", err)
	}
	if !errors.Is(extra, unix.EADDRNOTAVAIL) {
		t.Fatalf("the 101st connect: %v, want EADDRNOTAVAIL (the range is not exhausted)", extra)
	}
	time.Sleep(8*time.Second - time.Since(t0))
	t1 := time.Now()
	closeHeld()
	closeAccepted()
	time.Sleep(5 * interval) // TIME_WAIT to 127.0.0.2 is reused after 1 s
	stopChild(t, serve, syscall.SIGTERM)

	in, replay := burstIncident(t, dir, "port-exhaustion", t0, t1, stderr.String())
	if in.Subject.Netns != ns.Name || in.Subject.Remote.String() != "127.0.0.2:9090" || in.Severity != diag.Critical {
		t.Errorf("incident %v %+v, want critical towards 127.0.0.2:9090 in %s", in.Severity, in.Subject, ns.Name)
	}
	// One culprit: every incident about the destination (the TIME_WAIT
	// sockets the closed connections left too) names this process, and
	// each rule says it once.
	var l history.Listing
	if err := json.Unmarshal([]byte(mustRun(t, 0, "history", dir, "--since", t0.Add(-time.Minute).Format(time.RFC3339), "--json")), &l); err != nil {
		t.Fatal(err)
	}
	rules := map[string]int{}
	for _, x := range l.Incidents {
		if x.Subject.Remote.String() != "127.0.0.2:9090" {
			continue
		}
		rules[x.Rule]++
		if x.Subject.Pid != os.Getpid() {
			t.Errorf("%s incident names pid %d (%q), want this process, %d: %s", x.Rule, x.Subject.Pid, x.Subject.Command, os.Getpid(), x.Summary)
		}
	}
	for r, n := range rules {
		if n != 1 {
			t.Errorf("%d %s incidents about 127.0.0.2:9090, want 1", n, r)
		}
	}
	replaysAsFrom(t, dir, in, replay, interval, t0, t1, "port-exhaustion", "127.0.0.2:9090")
	// The text listing draws it: critical cells in the port-exhaustion strip.
	text := mustRun(t, 0, "history", "--history", dir, "--since", t0.Add(-time.Minute).Format(time.RFC3339), "--picture")
	t.Logf("history --picture:\n%s", text)
	if !regexp.MustCompile(`\|[ .iWC]*C[ .iWC]*\|  port-exhaustion `).MatchString(text) {
		t.Errorf("history --picture draws no critical port-exhaustion strip:\n%s", text)
	}
}

// SPDX-License-Identifier: Apache-2.0

package corpus

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// checkInterval is check's --interval in every case.
const checkInterval = "3s"

// run is one case in progress: the row it fills and its temp dir.
type run struct {
	t    *testing.T
	row  *Row
	dir  string
	pids map[string]int // label -> pid of the processes started
	// invalid says why the workload did not do what the case claims,
	// when it did not: the run then tests nothing, whatever check said.
	invalid []string
}

// claimFailed records that the workload broke the case's own claim and
// fails the test (fatal stops it).
func (r *run) claimFailed(fatal bool, format string, args ...any) {
	r.t.Helper()
	s := fmt.Sprintf(format, args...)
	r.invalid = append(r.invalid, s)
	if fatal {
		r.t.Fatal(s)
	}
	r.t.Error(s)
}

// need skips the case, and notes why in its row, unless we are root and
// every binary is on PATH.
func (r *run) need(bins ...string) {
	r.t.Helper()
	if os.Geteuid() != 0 {
		r.row.Skipped = "needs root"
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil && r.row.Skipped == "" {
			r.row.Skipped = b + " not installed"
		}
	}
	if r.row.Skipped != "" {
		r.t.Skip(r.row.Skipped)
	}
	testns.NeedRoot(r.t)
}

// measured adds a workload figure to the row and the log.
func (r *run) measured(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.t.Log("measured: " + s)
	r.row.Measured = append(r.row.Measured, s)
}

// proc is a process we started in a namespace, in a process group of its
// own (nginx's workers join it).
type proc struct {
	label    string
	cmd      *exec.Cmd
	out, err string // files holding its stdout and stderr
	exited   chan struct{}
	once     sync.Once
	status   error
}

// start runs argv in namespace ns ("ip netns exec", which execs, so the
// pid is the program's). It is stopped at cleanup, also on failure.
func (r *run) start(ns, label string, argv ...string) *proc {
	r.t.Helper()
	p := &proc{label: label, out: filepath.Join(r.dir, label+".out"), err: filepath.Join(r.dir, label+".err"), exited: make(chan struct{})}
	fo, err := os.Create(p.out)
	if err != nil {
		r.t.Fatal(err)
	}
	defer fo.Close()
	fe, err := os.Create(p.err)
	if err != nil {
		r.t.Fatal(err)
	}
	defer fe.Close()
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	p.cmd.Stdout, p.cmd.Stderr = fo, fe
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatalf("%s: %v", label, err)
	}
	pid := p.cmd.Process.Pid
	r.pids[label] = pid
	go func() {
		// WNOWAIT: learn of the exit without reaping, so that the pid
		// (and the group id) stay ours until stop reaps.
		var si unix.Siginfo
		for unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(p.exited)
	}()
	r.t.Cleanup(func() { p.stop(r.t) })
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// running says whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 5 s) and what is
// left of its group, reaps it and returns its exit status.
func (p *proc) stop(t testing.TB) error {
	p.once.Do(func() {
		pid := p.pid()
		if p.running() {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				t.Logf("%s (pid %d) ignored SIGTERM for 5 s: SIGKILL", p.label, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				<-p.exited
			}
		}
		// The leader is not reaped yet, so its group id is still ours.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		p.status = p.cmd.Wait()
	})
	return p.status
}

// wait waits up to d for the process to exit by itself and reaps it.
func (p *proc) wait(t testing.TB, d time.Duration) error {
	select {
	case <-p.exited:
	case <-time.After(d):
		return fmt.Errorf("%s still running after %v", p.label, d)
	}
	return p.stop(t)
}

func (p *proc) stdout() string { b, _ := os.ReadFile(p.out); return string(b) }
func (p *proc) stderr() string { b, _ := os.ReadFile(p.err); return string(b) }

// nsOut runs a short command in namespace ns and returns its stdout.
func nsOut(ns string, argv ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ip netns exec %s %s: %w: %s", ns, strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// nsRun is nsOut that fails the test on error.
func nsRun(t testing.TB, ns string, argv ...string) string {
	t.Helper()
	out, err := nsOut(ns, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitListen waits until something listens on TCP port in ns.
func waitListen(t testing.TB, ns string, port int, p *proc) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		if strings.TrimSpace(nsRun(t, ns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port))) != "" {
			return
		}
		if p != nil && !p.running() {
			t.Fatalf("%s exited before listening on :%d\nstdout: %s\nstderr: %s", p.label, port, p.stdout(), p.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on :%d in %s after 10 s", port, ns)
}

// veth joins namespaces a and b with a veth pair, addresses aAddr and
// bAddr (with prefix length), both ends up.
func veth(t testing.TB, a, b, aAddr, bAddr string) {
	t.Helper()
	testns.Run(t, "ip", "-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b)
	testns.Run(t, "ip", "-n", a, "addr", "add", aAddr, "dev", "eth0")
	testns.Run(t, "ip", "-n", b, "addr", "add", bAddr, "dev", "eth0")
	testns.Run(t, "ip", "-n", a, "link", "set", "eth0", "up")
	testns.Run(t, "ip", "-n", b, "link", "set", "eth0", "up")
}

// tcpStat is a namespace's TCP counters and socket states at one moment.
type tcpStat struct {
	at                                 time.Time
	activeOpens, passiveOpens, outRsts int64
	states                             map[string]int
	// TIME-WAIT sockets on a listener's port (this host closed an
	// incoming connection first) by local address, the others (outgoing)
	// by remote address.
	twIncoming, twOutgoing map[string]int
}

// readStat reads /proc/net/snmp and ss in ns.
func readStat(ns string) (tcpStat, error) {
	s := tcpStat{at: time.Now(), states: map[string]int{}, twIncoming: map[string]int{}, twOutgoing: map[string]int{}}
	snmp, err := nsOut(ns, "cat", "/proc/net/snmp")
	if err != nil {
		return s, err
	}
	sockets, err := nsOut(ns, "ss", "-Htan")
	if err != nil {
		return s, err
	}
	var head []string
	sc := bufio.NewScanner(strings.NewReader(snmp))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i := 1; i < len(f) && i < len(head); i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			switch head[i] {
			case "ActiveOpens":
				s.activeOpens = v
			case "PassiveOpens":
				s.passiveOpens = v
			case "OutRsts":
				s.outRsts = v
			}
		}
	}
	port := func(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
	listen := map[string]bool{}
	var tw [][]string
	sc = bufio.NewScanner(strings.NewReader(sockets))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		s.states[f[0]]++
		switch f[0] {
		case "LISTEN":
			listen[port(f[3])] = true
		case "TIME-WAIT":
			tw = append(tw, f)
		}
	}
	for _, f := range tw {
		if listen[port(f[3])] {
			s.twIncoming[f[3]]++
		} else {
			s.twOutgoing[f[4]]++
		}
	}
	return s, nil
}

// top lists the n largest entries of m as "key n".
func top(m map[string]int, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for i, k := range keys {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// place is a namespace to check and what it holds.
type place struct{ role, ns string }

// check runs "tcpdoctor check --netns NS --interval 3s --json" through
// the real command line, once per namespace at the same time, records
// the findings and exit codes in the row, and measures each namespace's
// opens and socket states over the same window.
func (r *run) check(places ...place) {
	r.t.Helper()
	type result struct {
		code     int
		out, err string
		before   tcpStat
		after    tcpStat
		statErr  error
	}
	res := make([]result, len(places))
	var wg sync.WaitGroup
	for i, pl := range places {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb bytes.Buffer
			env := cli.DefaultEnv()
			env.Stdout, env.Stderr, env.IsTTY = &out, &errb, false
			var err1, err2 error
			res[i].before, err1 = readStat(pl.ns)
			res[i].code = cli.Main([]string{"check", "--netns", pl.ns, "--interval", checkInterval, "--json"}, env)
			res[i].after, err2 = readStat(pl.ns)
			res[i].statErr = errors.Join(err1, err2)
			res[i].out, res[i].err = out.String(), errb.String()
		}()
	}
	wg.Wait()
	for i, pl := range places {
		x := res[i]
		if x.statErr != nil {
			r.t.Fatal(x.statErr)
		}
		if x.code != 0 && x.code != 1 {
			r.t.Fatalf("check in %s (%s): exit %d\nstdout: %s\nstderr: %s", pl.role, pl.ns, x.code, x.out, x.err)
		}
		var rep Report
		if err := json.Unmarshal([]byte(x.out), &rep); err != nil {
			r.t.Fatalf("check in %s: json: %v\n%s", pl.role, err, x.out)
		}
		if x.err != "" {
			r.t.Logf("check in %s: stderr: %s", pl.role, x.err)
		}
		r.row.Exit = append(r.row.Exit, x.code)
		alarm := false
		for _, f := range rep.Findings {
			alarm = alarm || f.Severity >= diag.Warning
		}
		if alarm != (x.code == 1) {
			r.t.Errorf("check in %s: exit %d with a finding at warning or above: %v", pl.role, x.code, alarm)
		}
		r.row.Got = append(r.row.Got, rep.Findings...)
		r.t.Logf("check in %s ns %s: exit %d, %d findings", pl.role, pl.ns, x.code, len(rep.Findings))
		for _, f := range rep.Findings {
			var ev []string
			for _, e := range f.Evidence {
				ev = append(ev, e.Name+"="+e.Value)
			}
			r.t.Logf("  %s\n    summary: %s\n    evidence: %s", Describe(f), f.Summary, strings.Join(ev, " | "))
		}
		for _, u := range rep.Unknown {
			r.t.Logf("  unknown %s: %s", u.Rule, u.Reason)
		}
		a, b := x.before, x.after
		sec := b.at.Sub(a.at).Seconds()
		fig := fmt.Sprintf("%s ns, check window: %.0f active opens/s, %.0f passive opens/s; sockets after: %s",
			pl.role, float64(b.activeOpens-a.activeOpens)/sec, float64(b.passiveOpens-a.passiveOpens)/sec, top(b.states, 6))
		var tw []string
		if len(b.twIncoming) > 0 {
			tw = append(tw, "on listener ports (closed first here) "+top(b.twIncoming, 2))
		}
		if len(b.twOutgoing) > 0 {
			tw = append(tw, "outgoing to "+top(b.twOutgoing, 2))
		}
		if len(tw) > 0 {
			fig += "; TIME-WAIT " + strings.Join(tw, "; ")
		}
		r.measured("%s", fig)
	}
}

// writeFile writes a config file into the case's temp dir.
func (r *run) writeFile(name, content string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// openDir makes the temp dir and its parent readable to nginx's
// unprivileged workers.
func openDir(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestNoSilentEmpties: a filter that names what is not there is refused
// (exit 2), one that matches nothing says so on stderr (exit 0).
func TestNoSilentEmpties(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"sockets", "--pid", "999999999"}, ExitUsage, "--pid 999999999: no such process"},
		{[]string{"check", "--pid", "999999999", "--interval", "0"}, ExitUsage, "--pid 999999999: no such process"},
		{[]string{"sockets", "--pid", "-4"}, ExitUsage, "not a process id"},
		{[]string{"sockets", "--from", overflowFixture, "--port", "1"}, ExitOK, "no socket matched --port 1 in " + overflowFixture},
		{[]string{"sockets", "--from", overflowFixture, "--state", "time-wait", "--json"}, ExitOK, "no socket matched --state time-wait"},
		{[]string{"check", "--from", overflowFixture, "--pid", "1"}, ExitOK, "no finding names pid 1"},
	} {
		code, out, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q (stdout %q)", tc.args, code, stderr, tc.code, tc.msg, out)
		}
	}
}

// TestFromStdin: --from - reads the recording from standard input, as
// record -o - writes it.
func TestFromStdin(t *testing.T) {
	data, err := os.ReadFile(overflowFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "--from", "-"}, {"sockets", "--from", "-", "--port", "8080"}} {
		var out, errb bytes.Buffer
		e := &Env{Stdout: &out, Stderr: &errb, Stdin: bytes.NewReader(data), Getenv: func(string) string { return "" }, ProcRoot: "/proc"}
		_, want, _ := run(t, append(args[:1:1], append([]string{"--from", overflowFixture}, args[3:]...)...)...)
		code := Main(args, e)
		if code == ExitUsage || code == ExitCollect || out.String() != want {
			t.Errorf("%v: exit %d (%s), stdout differs from --from FILE:\n%s\nwant:\n%s", args, code, errb.String(), out.String(), want)
		}
	}
	if code, _, stderr := run(t, "check", "--from", "-"); code != ExitUsage || !strings.Contains(stderr, "no standard input") {
		t.Errorf("--from - without stdin: exit %d (%s)", code, stderr)
	}
}

// TestPidInOtherNetns: `sockets --pid P` and `check --pid P` look in P's
// own network namespace (as trace does), not in ours.
func TestPidInOtherNetns(t *testing.T) {
	ns := testns.New(t, "pid")
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "python3", "-c",
		"import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(1); print(s.getsockname()[1], flush=True); sys.stdin.read()")
	port, _, err := testns.ChildIn(t, cmd)
	if err != nil {
		t.Fatalf("listener in %s: %v", ns.Name, err)
	}
	pid := cmd.Process.Pid
	code, out, stderr := run(t, "sockets", "--pid", strconv.Itoa(pid), "--bpf", "off")
	if code != ExitOK || !strings.Contains(out, "127.0.0.1:"+port) || !strings.Contains(out, "LISTEN") {
		t.Errorf("sockets --pid %d: exit %d (%s):\n%s", pid, code, stderr, out)
	}
	if strings.Contains(stderr, "no socket matched") {
		t.Errorf("sockets --pid %d said nothing matched: %s", pid, stderr)
	}
}

// TestNoteOnce: one source failure in many namespaces is one note naming
// them, not a note each.
func TestNoteOnce(t *testing.T) {
	var ss []series
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		s := &snapshot.Snapshot{Netns: snapshot.Netns{Name: name},
			Errors: []snapshot.SourceError{{Source: "procs.owners", Err: "1 processes unreadable"}}}
		ss = append(ss, series{Netns: name, Snaps: []*snapshot.Snapshot{s, s}})
	}
	var errb bytes.Buffer
	warnErrors(&Env{Stderr: &errb}, ss)
	want := "tcpdoctor: note: 5 network namespaces (a, b, c, ...): source procs.owners incomplete: 1 processes unreadable\n"
	if errb.String() != want {
		t.Errorf("got %q, want %q", errb.String(), want)
	}
}

// TestProgressAfterStart: an error found at once comes without "sampling
// for ..." before it.
func TestProgressAfterStart(t *testing.T) {
	code, _, stderr := run(t, "check", "--netns", "no-such-netns-here")
	if code != ExitUsage || strings.Contains(stderr, "sampling") {
		t.Errorf("check --netns no-such: exit %d, stderr %q", code, stderr)
	}
}

// TestOtherNetnsNoted: a plain check says that other namespaces exist and
// were not looked in.
func TestOtherNetnsNoted(t *testing.T) {
	testns.New(t, "other")
	code, _, stderr := run(t, "check", "--interval", "0", "--bpf", "off")
	if code != ExitOK && code != ExitFindings || !strings.Contains(stderr, "other network namespace") || !strings.Contains(stderr, "--all-netns") {
		t.Errorf("check: exit %d, stderr %q", code, stderr)
	}
	// One line of 80 columns for up to 9 others (a terminal's width).
	m := regexp.MustCompile(`tcpdoctor: note: (\d+) other network namespaces? not checked.*`).FindStringSubmatch(stderr)
	if m == nil || len(m[1]) == 1 && len(m[0]) > 80 {
		t.Errorf("check's note on other namespaces: %q (from %q), want one of 80 columns or fewer", m, stderr)
	}
	if _, _, stderr := run(t, "check", "--interval", "0", "--bpf", "off", "--all-netns"); strings.Contains(stderr, "not checked") {
		t.Errorf("check --all-netns still notes others: %q", stderr)
	}
}

// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// hostile is a name any local user can give a process (prctl
// PR_SET_NAME), a namespace (a file under /run/netns) or a file: printed
// raw it retitles the window, clears the screen and starts a forged line.
const hostile = "\x1b]0;PWN\x07\x1b[2J\nX"

// zoned is an IPv6 address whose zone, which a file can make anything,
// is hostile.
var zoned = netip.MustParseAddrPort("[fe80::1%" + hostile + "]:40000")

// hostileEscaped is hostile as text output prints it.
const hostileEscaped = `\x1b]0;PWN\a\x1b[2J\nX`

// assertEscaped fails when out holds a raw escape or bell, or a line that
// hostile's newline started, or lacks the escaped name want times.
func assertEscaped(t *testing.T, what, out string, want int) {
	t.Helper()
	if i := strings.IndexAny(out, "\x1b\x07"); i >= 0 {
		t.Errorf("%s: raw ESC or BEL reached the terminal: %q", what, out[max(i-40, 0):min(i+40, len(out))])
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "X") {
			t.Errorf("%s: forged line %q", what, l)
			break
		}
	}
	if n := strings.Count(out, hostileEscaped); n < want {
		t.Errorf("%s: %q appears %d times, want at least %d", what, hostileEscaped, n, want)
	}
}

// hostileFixture rewrites the listen-overflow fixture with the process
// (pid 4242), its namespace, a source error and a peer's zone (socket
// 103) named hostile, and adds a second namespace so the sockets table
// shows the namespace column.
func hostileFixture(t *testing.T) string {
	t.Helper()
	f, err := os.Open(overflowFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		s.Netns.Name = hostile
		if p := s.Procs[4242]; p != nil {
			p.Command = hostile
		}
		s.Errors = append(s.Errors, snapshot.SourceError{Source: "procs", Err: "open /proc/77/fd: " + hostile})
		for i := range s.Sockets {
			if s.Sockets[i].Cookie == 103 {
				s.Sockets[i].Remote = snapshot.EndpointOf(zoned)
			}
		}
	}
	other := *snaps[len(snaps)-1]
	other.Netns = snapshot.Netns{Name: "other"}
	other.Errors = nil
	snaps = append(snaps, &other)
	path := filepath.Join(t.TempDir(), "hostile.jsonl")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := snapshot.NewWriter(out, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckTextEscapesNames(t *testing.T) {
	code, out, stderr := run(t, "check", "--from", hostileFixture(t))
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d: %s", code, ExitFindings, stderr)
	}
	if !strings.Contains(out, "listen-overflow") {
		t.Fatalf("the fixture's finding is missing:\n%s", out)
	}
	// The finding names the process and its namespace; the NOTE line
	// carries the source error.
	assertEscaped(t, "check stdout", out, 3)
}

func TestSocketsTableEscapesNames(t *testing.T) {
	code, out, stderr := run(t, "sockets", "--from", hostileFixture(t), "--port", "8080")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Five sockets of pid 4242 in the hostile namespace: each row names
	// both; one has the zoned peer.
	assertEscaped(t, "sockets stdout", out, 11)
	assertEscaped(t, "sockets stderr", stderr, 2)
}

// TestErrorPrinterEscapes: the top-level error printer quotes a file
// name from the command line, which can hold any byte but '/'.
func TestErrorPrinterEscapes(t *testing.T) {
	code, out, stderr := run(t, "check", "--from", filepath.Join(t.TempDir(), hostile))
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d: %s", code, ExitUsage, stderr)
	}
	if out != "" {
		t.Errorf("stdout %q", out)
	}
	assertEscaped(t, "error", stderr, 1)
	if n := strings.Count(stderr, "\n"); n != 1 {
		t.Errorf("error printed on %d lines, want 1: %q", n, stderr)
	}
}

func TestBDPEscapesNetns(t *testing.T) {
	code, out, stderr := run(t, "bdp", "--rtt", "20ms", "--bandwidth", "100mbit", "--from", hostileFixture(t))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	assertEscaped(t, "bdp", out, 1)
}

// TestProgressEscapes: notes on stderr quote errors, which quote names.
func TestProgressEscapes(t *testing.T) {
	var b strings.Builder
	e := &Env{Stderr: &b}
	e.progress("note: %v", errors.New("netns "+hostile+": permission denied"))
	assertEscaped(t, "note", b.String(), 1)
	if n := strings.Count(b.String(), "\n"); n != 1 {
		t.Errorf("note on %d lines, want 1: %q", n, b.String())
	}
}

// TestTraceTableEscapesAddresses: `trace --from` prints the peer of a
// recording, whose zone is hostile, in the table and the verdict.
func TestTraceTableEscapesAddresses(t *testing.T) {
	b, err := os.ReadFile(traceFile(t))
	if err != nil {
		t.Fatal(err)
	}
	remote, err := json.Marshal(zoned.String())
	if err != nil {
		t.Fatal(err)
	}
	rec := strings.Replace(string(b), `"remote":"198.18.1.2:40000"`, `"remote":`+string(remote), 1)
	path := filepath.Join(t.TempDir(), "zoned.jsonl")
	if err := os.WriteFile(path, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "trace", "--from", path, "--bandwidth", "100mbit")
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d: %s", code, ExitFindings, stderr)
	}
	assertEscaped(t, "trace table", out, 2)
}

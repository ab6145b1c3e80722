// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if intended):\n%s", path, got)
	}
}

// filter is the listing's filter on ports and pid, as the CLI builds it.
func filter(pid, lport int) EventFilter {
	return EventFilter{Pid: pid, Ports: func(lp, _ int) bool { return lport == 0 || lp == lport }}
}

func TestWriteEvents(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cur := &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: "host"}, Events: &snapshot.Events{Since: t0.Add(-2 * time.Second), Until: t0, Flows: []snapshot.EventFlow{
		{Pid: 7, Command: "python3", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Opens: 240, ActiveCloses: 240},
		{Pid: 9, Command: "nginx", Remote: netip.MustParseAddrPort("0.0.0.0:0"), LocalPort: 8080, ActiveCloses: 10},
		{Remote: netip.MustParseAddrPort("10.0.0.9:5432"), Refused: 5, TimedOut: 2},
		{Pid: 11, Command: "proxy", Remote: netip.MustParseAddrPort("10.0.0.5:80"), Opens: 9, FailedPorts: 4, Abandoned: 1},
	}}}
	ws := []Window{{Netns: "host", Prev: &snapshot.Snapshot{Taken: t0.Add(-2 * time.Second)}, Cur: cur}}
	var b strings.Builder
	WriteEvents(&b, ws, filter(0, 0))
	out := b.String()
	for _, want := range []string{"over 2s", "python3", "127.0.0.1:7000", "120.0", "accepted on :8080",
		"  -  ", "5 refused, 2 timed out", "4 no port, 1 abandoned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	WriteEvents(&b, ws, filter(0, 8080))
	if out := b.String(); strings.Contains(out, "python3") || !strings.Contains(out, "nginx") {
		t.Errorf("--lport 8080:\n%s", out)
	}
	b.Reset()
	cur.Events.Drops = []snapshot.EventDrop{{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380}}
	cur.Events.Resets = []snapshot.EventReset{{Sent: true, Reason: "TCP_STATE", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Count: 5},
		{Remote: netip.MustParseAddrPort("127.0.0.1:0"), LocalPort: 8080, Count: 4}}
	cur.Events.Retransmits = []snapshot.EventRetransmit{{Remote: netip.MustParseAddrPort("10.0.0.5:443"), SYN: true, Count: 3}}
	WriteEvents(&b, ws, filter(0, 0))
	out = b.String()
	for _, want := range []string{"drop", "TCP_LISTEN_OVERFLOW", "listener 0.0.0.0:8080", "380", "reset sent", "TCP_STATE", "reset received", "127.0.0.1 on :8080", "SYN retransmit", "10.0.0.5:443"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	WriteEvents(&b, ws, filter(0, 8080))
	if out := b.String(); strings.Contains(out, "TCP_STATE") || !strings.Contains(out, "TCP_LISTEN_OVERFLOW") || !strings.Contains(out, "reset received") {
		t.Errorf("--lport 8080 over drops and resets:\n%s", out)
	}
	b.Reset()
	WriteEvents(&b, ws, filter(7, 0))
	if out := b.String(); !strings.Contains(out, "python3") || strings.Contains(out, "nginx") || strings.Contains(out, "TCP_STATE") {
		t.Errorf("--pid 7: only its flows, no kernel events:\n%s", out)
	}
	b.Reset()
	cur.Events = nil
	WriteEvents(&b, ws, filter(0, 0))
	if b.Len() != 0 {
		t.Errorf("no events: printed %q", b.String())
	}
}

// TestEventTablesGolden pins the bytes of both eBPF tables under
// `sockets --interval`: two namespaces, every kind of row, a missing
// program (testdata/events.txt; -update rewrites it).
func TestEventTablesGolden(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func() *snapshot.Events {
		return &snapshot.Events{Since: t0.Add(-2 * time.Second), Until: t0,
			Flows: []snapshot.EventFlow{
				{Pid: 7, Command: "python3", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Opens: 240, ActiveCloses: 240, Ended: 240, Lifetime: 3 * time.Second},
				{Pid: 9, Command: "nginx", Remote: netip.MustParseAddrPort("0.0.0.0:0"), LocalPort: 8080, ActiveCloses: 10},
				{Remote: netip.MustParseAddrPort("10.0.0.9:5432"), Refused: 5, TimedOut: 2, Unreachable: 1},
				{Pid: 11, Command: "proxy", Remote: netip.MustParseAddrPort("[2001:db8::5]:80"), Opens: 9, FailedPorts: 4, Abandoned: 1, PeerCloses: 3},
			},
			Drops: []snapshot.EventDrop{{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380},
				{Reason: "NO_SOCKET", Count: 2}},
			Resets: []snapshot.EventReset{{Sent: true, Reason: "TCP_STATE", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Count: 5},
				{Remote: netip.MustParseAddrPort("127.0.0.1:0"), LocalPort: 8080, Count: 4}},
			Retransmits: []snapshot.EventRetransmit{{Remote: netip.MustParseAddrPort("10.0.0.5:443"), SYN: true, Count: 3},
				{Remote: netip.MustParseAddrPort("10.0.0.6:443"), LocalPort: 40000, Count: 17}},
			Missing: []snapshot.EventProgram{{Program: "kfree_skb", Reason: "not attached"}},
			// Host-wide: said once, not per namespace.
			Skipped: []snapshot.EventProgramSkipped{{Program: "inet_sock_set_state", Runs: 3}},
		}
	}
	var ws []Window
	for _, ns := range []string{"host", "tdlab-a"} {
		ws = append(ws, Window{Netns: ns, Prev: &snapshot.Snapshot{Taken: t0.Add(-2 * time.Second)}, Cur: &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: ns}, Events: ev()}})
	}
	var b strings.Builder
	WriteEvents(&b, ws, filter(0, 0))
	golden(t, "events.txt", b.String())
}

// hostile is a name any local user can give a process (prctl
// PR_SET_NAME) or a namespace (a file under /run/netns): printed raw it
// retitles the window, clears the screen and starts a forged line.
const hostile = "\x1b]0;PWN\x07\x1b[2J\nX"

// hostileEscaped is hostile as text output prints it.
const hostileEscaped = `\x1b]0;PWN\a\x1b[2J\nX`

// TestEventTablesEscapeNames: the eBPF tables name processes (their
// comm), namespaces and reasons.
func TestEventTablesEscapeNames(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	zoned := netip.MustParseAddrPort("[fe80::1%" + hostile + "]:40000")
	cur := &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: hostile}, Events: &snapshot.Events{Since: t0.Add(-time.Second), Until: t0,
		Flows:   []snapshot.EventFlow{{Pid: 7, Command: hostile, Remote: zoned, Opens: 3}},
		Drops:   []snapshot.EventDrop{{Reason: hostile, Count: 2}},
		Resets:  []snapshot.EventReset{{Sent: true, Reason: "TCP_STATE", Remote: zoned, Count: 1}},
		Missing: []snapshot.EventProgram{{Program: hostile, Reason: hostile}}}}
	var b strings.Builder
	WriteEvents(&b, []Window{{Netns: hostile, Prev: &snapshot.Snapshot{Taken: t0.Add(-time.Second)}, Cur: cur}}, filter(0, 0))
	out := b.String()
	if i := strings.IndexAny(out, "\x1b\x07"); i >= 0 {
		t.Errorf("raw ESC or BEL reached the terminal: %q", out[max(i-40, 0):min(i+40, len(out))])
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "X") {
			t.Errorf("forged line %q", l)
		}
	}
	// The flow row names the namespace, the command and the zoned peer,
	// the drop row the namespace and the reason, the reset row the
	// namespace and the zoned peer, the note the program and its reason.
	if n := strings.Count(out, hostileEscaped); n < 9 {
		t.Errorf("%q appears %d times, want at least 9:\n%s", hostileEscaped, n, out)
	}
}

package cli

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestBPFFlag(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--bpf", "bogus"},
		{"sockets", "--bpf", "yes"},
		{"check", "--from", "x.jsonl", "--bpf", "on"},
		{"record", "-o", "-", "--bpf", "maybe"},
		{"serve", "--bpf", "sometimes"},
	} {
		if code, _, stderr := run(t, args...); code != ExitUsage || !strings.Contains(stderr, "--bpf") {
			t.Errorf("%v: exit %d (%s), want %d naming --bpf", args, code, stderr, ExitUsage)
		}
	}
	// The test Env has no loader: on fails with exit 3, auto and off go
	// on quietly.
	if code, _, stderr := run(t, "check", "--interval", "0", "--bpf", "on"); code != ExitCollect || !strings.Contains(stderr, "eBPF") {
		t.Errorf("--bpf on without a loader: exit %d (%s), want %d", code, stderr, ExitCollect)
	}
	for _, mode := range []string{"auto", "off"} {
		if code, _, stderr := run(t, "sockets", "--bpf", mode); code != ExitOK || strings.Contains(stderr, "eBPF") {
			t.Errorf("--bpf %s without a loader: exit %d (%s)", mode, code, stderr)
		}
	}
}

func TestPrintEvents(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cur := &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: "host"}, Events: &snapshot.Events{Since: t0.Add(-2 * time.Second), Until: t0, Flows: []snapshot.EventFlow{
		{Pid: 7, Command: "python3", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Opens: 240, ActiveCloses: 240},
		{Pid: 9, Command: "nginx", Remote: netip.MustParseAddrPort("0.0.0.0:0"), LocalPort: 8080, ActiveCloses: 10},
		{Remote: netip.MustParseAddrPort("10.0.0.9:5432"), Refused: 5, TimedOut: 2},
		{Pid: 11, Command: "proxy", Remote: netip.MustParseAddrPort("10.0.0.5:80"), Opens: 9, FailedPorts: 4, Abandoned: 1},
	}}}
	ss := []series{{Netns: "host", Snaps: []*snapshot.Snapshot{{Taken: t0.Add(-2 * time.Second)}, cur}}}
	var b strings.Builder
	printEvents(&b, ss, &socketFilter{})
	out := b.String()
	for _, want := range []string{"over 2s", "python3", "127.0.0.1:7000", "120.0", "accepted on :8080",
		"  -  ", "5 refused, 2 timed out", "4 no port, 1 abandoned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printEvents(&b, ss, &socketFilter{lport: 8080})
	if out := b.String(); strings.Contains(out, "python3") || !strings.Contains(out, "nginx") {
		t.Errorf("--lport 8080:\n%s", out)
	}
	b.Reset()
	cur.Events.Drops = []snapshot.EventDrop{{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380}}
	cur.Events.Resets = []snapshot.EventReset{{Sent: true, Reason: "TCP_STATE", Remote: netip.MustParseAddrPort("127.0.0.1:7000"), Count: 5},
		{Remote: netip.MustParseAddrPort("127.0.0.1:0"), LocalPort: 8080, Count: 4}}
	cur.Events.Retransmits = []snapshot.EventRetransmit{{Remote: netip.MustParseAddrPort("10.0.0.5:443"), SYN: true, Count: 3}}
	printEvents(&b, ss, &socketFilter{})
	out = b.String()
	for _, want := range []string{"drop", "TCP_LISTEN_OVERFLOW", "listener 0.0.0.0:8080", "380", "reset sent", "TCP_STATE", "reset received", "127.0.0.1 on :8080", "SYN retransmit", "10.0.0.5:443"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printEvents(&b, ss, &socketFilter{lport: 8080})
	if out := b.String(); strings.Contains(out, "TCP_STATE") || !strings.Contains(out, "TCP_LISTEN_OVERFLOW") || !strings.Contains(out, "reset received") {
		t.Errorf("--lport 8080 over drops and resets:\n%s", out)
	}
	b.Reset()
	cur.Events = nil
	printEvents(&b, ss, &socketFilter{})
	if b.Len() != 0 {
		t.Errorf("no events: printed %q", b.String())
	}
}

// Collection writes to no socket unless asked: the commands' defaults
// leave the pidfd_getfd probe off, --pidfd-buflock turns it on, and a
// lock source that is not loaded says why.
func TestPidfdOptIn(t *testing.T) {
	var errb strings.Builder
	e := &Env{Stderr: &errb}
	for _, c := range []struct {
		args  []string
		pidfd bool
		off   string
	}{
		{nil, false, "this build has no eBPF loader"},
		{[]string{"--bpf", "off"}, false, "--bpf off"},
		{[]string{"--pidfd-buflock"}, true, "this build has no eBPF loader"},
	} {
		var o bpfOpts
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		set, err := o.extras(e, &sourceOpts{}, diagnoseNeed)
		if err != nil {
			t.Fatal(err)
		}
		set.Close()
		opts := set.Options(collect.Options{Owners: true})
		if opts.BufLock != c.pidfd || opts.Locks != nil || !strings.Contains(opts.LocksOff, c.off) {
			t.Errorf("%v: BufLock %v, Locks %v, LocksOff %q; want BufLock %v and a reason with %q", c.args, opts.BufLock, opts.Locks, opts.LocksOff, c.pidfd, c.off)
		}
		if set.Options(collect.Options{}).BufLock {
			t.Errorf("%v: pidfd probe asked for without owners", c.args)
		}
	}
	if code, _, stderr := run(t, "check", "--from", overflowFixture, "--pidfd-buflock"); code != ExitUsage || !strings.Contains(stderr, "--pidfd-buflock") {
		t.Errorf("--pidfd-buflock with --from: exit %d (%s), want %d", code, stderr, ExitUsage)
	}
}

// `sockets --locks` reads lock bits for JSON only.
func TestSocketsLocksNeedsJSON(t *testing.T) {
	if code, _, stderr := run(t, "sockets", "--locks"); code != ExitUsage || !strings.Contains(stderr, "--json") {
		t.Errorf("sockets --locks: exit %d (%s), want %d", code, stderr, ExitUsage)
	}
}

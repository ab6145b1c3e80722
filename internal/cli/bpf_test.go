// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
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
		set, err := o.allExtras(e, &sourceOpts{})
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

// `sockets --locks` shows the lock bits in the table too: its Pinned
// column, from a recording's bits.
func TestSocketsLocksTable(t *testing.T) {
	code, out, stderr := run(t, "sockets", "--locks", "--from", "../rules/testdata/connection-bottleneck/fires.jsonl", "--state", "established")
	if code != ExitOK {
		t.Fatalf("sockets --locks --from: exit %d (%s)", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := slices.Index(strings.Fields(lines[0]), "Pinned")
	if col < 0 {
		t.Fatalf("no Pinned column:\n%s", out)
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > col {
			seen[f[col]] = true
		}
	}
	for v := range seen {
		if v != "-" && v != "?" && v != "snd" && v != "rcv" && v != "snd,rcv" {
			t.Errorf("Pinned value %q", v)
		}
	}
	if len(seen) == 0 {
		t.Errorf("no rows:\n%s", out)
	}
}

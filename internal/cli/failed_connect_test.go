// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// bpfEnv is the production Env (the eBPF loaders) writing to buffers.
func bpfEnv(t *testing.T, out, errb *bytes.Buffer) *Env {
	testns.NeedRoot(t)
	src, err := bpfload.Programs().Events(nil)
	if err != nil {
		t.Skipf("eBPF events cannot load here: %v", err)
	}
	_ = src.Close()
	e := DefaultEnv()
	e.Stdout, e.Stderr, e.IsTTY = out, errb, false
	return e
}

// withRefusals runs fn while a health checker is refused in ns and
// returns how many connects were refused.
func withRefusals(t *testing.T, ns netns.NS, fn func()) int {
	stop := testns.Refusals(t, ns)
	fn()
	return stop()
}

// TestWatchRefusedConnects: a refused connect streams as ECONNREFUSED,
// with no process (the kernel ends it in softirq context), never as a
// port allocation failure.
func TestWatchRefusedConnects(t *testing.T) {
	var out, errb bytes.Buffer
	e := bpfEnv(t, &out, &errb)
	ns := testns.New(t, "watchref")
	var code int
	withRefusals(t, ns, func() {
		code = Main([]string{"watch", "--json", "--netns", ns.Name, "--kind", "failed-connect", "--count", "3", "--duration", "20s"}, e)
	})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, m := range watchLines(t, out.String(), 3) {
		if m.Kind != "failed-connect" || m.Netns != ns.Name || m.Remote != testns.RefusedDst || m.Reason != "ECONNREFUSED" || m.Pid != nil {
			t.Errorf("line %s: want failed-connect ECONNREFUSED to %s with no pid", m.text, testns.RefusedDst)
		}
	}
}

// TestRecordCheckRefusedConnects: over refused connects, record counts
// them as refused (failed_ports stays absent), attributed to this
// process (the only opener), and check finds nothing.
func TestRecordCheckRefusedConnects(t *testing.T) {
	var out, errb bytes.Buffer
	e := bpfEnv(t, &out, &errb)
	ns := testns.New(t, "recref")
	file := filepath.Join(t.TempDir(), "rec.jsonl")
	var code int
	refused := withRefusals(t, ns, func() {
		code = Main([]string{"record", "--bpf", "on", "--netns", ns.Name, "--interval", "1s", "--count", "2", "-o", file}, e)
	})
	if code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, errb.String())
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	var ports, got uint64
	for _, s := range snaps {
		if s.Events == nil {
			continue
		}
		for _, fl := range s.Events.Flows {
			ports += fl.FailedPorts
			if fl.Remote.String() == testns.RefusedDst {
				got += fl.Refused
				if fl.Refused > 0 && fl.Pid != os.Getpid() {
					t.Errorf("refused connects under pid %d, want this process (%d), the only opener", fl.Pid, os.Getpid())
				}
			}
		}
	}
	t.Logf("%d connects refused while recording, %d counted refused", refused, got)
	if ports != 0 || got == 0 {
		t.Errorf("recorded %d failed port allocations and %d refused connects; want 0 and some", ports, got)
	}

	out.Reset()
	errb.Reset()
	withRefusals(t, ns, func() {
		code = Main([]string{"check", "--bpf", "on", "--netns", ns.Name, "--interval", "1s", "--json"}, e)
	})
	if code != ExitOK {
		t.Errorf("check over refused connects: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	var rep struct {
		Findings []struct{ Rule string }
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || strings.Contains(out.String(), "EADDRNOTAVAIL") {
		t.Errorf("check over refused connects found %+v:\n%s", rep.Findings, out.String())
	}
}

// TestSocketsIntervalEventsJSON: with --json, sockets --interval prints
// one JSON array even when the eBPF source counted events (their tables
// are text, and print only without --json).
func TestSocketsIntervalEventsJSON(t *testing.T) {
	var out, errb bytes.Buffer
	e := bpfEnv(t, &out, &errb)
	ns := testns.New(t, "sockjsonev")
	args := []string{"sockets", "--bpf", "on", "--netns", ns.Name, "--interval", "1s"}
	var code int
	withRefusals(t, ns, func() { code = Main(append(args, "--json"), e) })
	if code != ExitOK {
		t.Fatalf("sockets --json: exit %d: %s", code, errb.String())
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Errorf("sockets --json --interval over refused connects is not one JSON array: %v\n%s", err, out.String())
	}
	out.Reset()
	withRefusals(t, ns, func() { code = Main(args, e) })
	if code != ExitOK || !strings.Contains(out.String(), "connection events between the samples") || !strings.Contains(out.String(), "refused") {
		t.Errorf("sockets --interval over refused connects: exit %d, no event table:\n%s", code, out.String())
	}
}

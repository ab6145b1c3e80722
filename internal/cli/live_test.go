// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestRecordReplay records a namespace of our own, then reads it back
// with sockets --from and check --from.
func TestRecordReplay(t *testing.T) {
	ns := testns.New(t, "rec")
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.1:7777")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(t.TempDir(), "snap.jsonl")
	code, _, stderr := run(t, "record", "--netns", ns.Name, "--interval", "200ms", "--count", "2", "-o", file)
	if code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "sample 2/2: 1 namespace, ") {
		t.Errorf("record's progress %q: want one namespace counted as one", stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.ReadAll(f)
	f.Close()
	if err != nil || len(snaps) != 2 || snaps[0].Netns.Name != ns.Name {
		t.Fatalf("recorded %d snapshots (%v)", len(snaps), err)
	}
	if snaps[1].Taken.Sub(snaps[0].Taken) < 150e6 {
		t.Errorf("samples %v apart, want about 200ms", snaps[1].Taken.Sub(snaps[0].Taken))
	}
	code, out, _ := run(t, "sockets", "--from", file, "--json", "--lport", "7777")
	if code != ExitOK {
		t.Fatalf("sockets --from: exit %d", code)
	}
	var rows []struct {
		State, Local string
		Pid          *int
		Command      *string
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("rows %v (%v)\n%s", rows, err, out)
	}
	if rows[0].State != "LISTEN" || rows[0].Pid == nil || *rows[0].Pid != os.Getpid() {
		t.Errorf("listener row %+v, want LISTEN owned by pid %d", rows[0], os.Getpid())
	}
	code, out, _ = run(t, "check", "--from", file, "--json")
	if code != ExitOK {
		t.Errorf("check of an idle namespace: exit %d\n%s", code, out)
	}
}

// TestCheckAllNetns sees our namespace among all of them.
func TestCheckAllNetns(t *testing.T) {
	ns := testns.New(t, "all")
	code, out, stderr := run(t, "check", "--all-netns", "--interval", "0", "--json", "--fail-on", "critical")
	if code != ExitOK && code != ExitFindings {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"`+ns.Name+`"`) {
		t.Errorf("--all-netns report does not list %s:\n%.500s", ns.Name, out)
	}
}

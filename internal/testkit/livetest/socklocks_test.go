// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSndbufLimitedIterLocks is TestSndbufLimited's pinned sender
// collected as the commands collect with --bpf and without
// --pidfd-buflock: the proof of the pin is the lock bit the iter/tcp walk
// read, and no fd is duplicated.
func TestSndbufLimitedIterLocks(t *testing.T) {
	l, err := bpfsource.OpenSockLocks(nil)
	if errors.Is(err, bpfsource.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 1e9, RateDown: 1e9})
	c, s, local, _ := pairAcross(t, p, setBuf(unix.SO_SNDBUF, 16<<10), nil)
	loop(t, []int{c, s}, writer(c))
	loop(t, []int{c, s}, reader(s, 256<<10, 0))
	time.Sleep(time.Second) // past slow start
	coll := &collect.Collector{Opts: collect.Options{Owners: true, Locks: l}, Now: time.Now}
	// The severity is TestSndbufLimited's business; this test wants the
	// finding's proof. A loaded machine can leave a window without one:
	// up to three windows.
	var f diag.Finding
	for try := 0; ; try++ {
		prev := coll.Collect([]netns.NS{p.client})[0]
		time.Sleep(1500 * time.Millisecond)
		cur := coll.Collect([]netns.NS{p.client})[0]
		if cur.BufLocks == nil || cur.BufLocks.From != snapshot.LocksIter {
			t.Fatalf("lock bits from %+v, want iter/tcp (errors %+v)", cur.BufLocks, cur.Errors)
		}
		if _, probed := cur.Failed(snapshot.SourceBufLock); probed {
			t.Errorf("the pidfd_getfd probe ran: %+v", cur.Errors)
		}
		r, b := Diagnose(t, prev, cur)
		if fs := r.Find("sndbuf-limited", diag.Info); len(fs) == 1 {
			f = fs[0]
			break
		}
		if try == 2 {
			t.Fatalf("no sndbuf-limited finding in three windows:\n%s", b)
		}
	}
	logFinding(t, f)
	var proof bool
	for _, e := range f.Evidence {
		t.Logf("  %s = %s  [%s]", e.Name, e.Value, e.Source)
		proof = proof || e.Name == "pinned" && strings.Contains(e.Source, "iter/tcp") && strings.Contains(e.Value, "set by the application")
	}
	if !proof {
		t.Errorf("no iter/tcp proof of the pin of %s in the evidence", local)
	}
}

// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Without owners the leak is still reported, grouped by the service the
// sockets were accepted on, and the rule says it could not name processes.
func TestCloseWaitLeakWithoutOwners(t *testing.T) {
	s := &snapshot.Snapshot{Taken: time.Unix(10, 0), Netns: snapshot.Netns{Name: "host"},
		Errors: []snapshot.SourceError{{Source: snapshot.SourceOwners, Err: "procs: open /proc: permission denied"}}}
	s.Sockets = append(s.Sockets,
		snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:8080"))},
		snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:9090"))})
	for i := 0; i < 120; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.CloseWait, Cookie: uint64(i + 1),
			Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:8080")), Remote: snapshot.EndpointFrom(netip.MustParseAddr("10.0.0.9"), uint16(40000+i))})
	}
	for i := 0; i < 110; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.CloseWait, Cookie: uint64(1000 + i),
			Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:9090")), Remote: snapshot.EndpointFrom(netip.MustParseAddr("10.0.0.8"), uint16(40000+i))})
	}
	fs, err := checkCloseWaitLeak(diag.NewInput(nil, s, diag.Options{}))
	if err == nil {
		t.Error("owners missing: want an unknown saying processes could not be named")
	}
	if len(fs) != 2 {
		t.Fatalf("want one finding per service, got %d: %+v", len(fs), fs)
	}
	if fs[0].Subject.Service.String() != "10.0.0.1:8080" || fs[0].Subject.Pid != 0 || len(fs[0].Subject.Peers) != 1 || fs[0].Subject.Peers[0] != (diag.Count{Key: "10.0.0.9", N: 120}) {
		t.Errorf("first finding subject %+v", fs[0].Subject)
	}
	if fs[1].Subject.Service.String() != "10.0.0.1:9090" {
		t.Errorf("second finding subject %+v", fs[1].Subject)
	}
}

// TestCloseWaitLeakClosedSinceDump: CLOSE_WAIT sockets no process held
// when the owners were read in full were closed just after the dump (a
// busy client turned away by a server at its cap): not a leak, unless
// they were in CLOSE_WAIT a window ago too.
func TestCloseWaitLeakClosedSinceDump(t *testing.T) {
	sample := func(at int64) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Taken: time.Unix(at, 0), Netns: snapshot.Netns{Name: "host"},
			Sources: []snapshot.SourceStat{{Source: snapshot.SourceOwners, OK: true}}}
		for i := 0; i < 120; i++ {
			s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.CloseWait, Cookie: uint64(i + 1),
				Local: snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.1"), uint16(40000+i)), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8080"))})
		}
		return s
	}
	prev, cur := sample(10), sample(13)
	fresh := &snapshot.Snapshot{Taken: time.Unix(10, 0), Netns: snapshot.Netns{Name: "host"}}
	if fs, err := checkCloseWaitLeak(diag.NewInput(fresh, cur, diag.Options{})); err != nil || len(fs) != 0 {
		t.Errorf("unowned and new since the last sample: %+v, %v; want nothing", fs, err)
	}
	if fs, _ := checkCloseWaitLeak(diag.NewInput(prev, cur, diag.Options{})); len(fs) != 1 || fs[0].Subject.Pid != 0 {
		t.Errorf("unowned but in CLOSE_WAIT a window ago: %+v, want one finding", fs)
	}
	for i := range cur.Sockets {
		cur.Sockets[i].Pids = snapshot.PidsOf(7)
	}
	if fs, _ := checkCloseWaitLeak(diag.NewInput(fresh, cur, diag.Options{})); len(fs) != 1 || fs[0].Subject.Pid != 7 {
		t.Errorf("owned by pid 7: %+v, want one finding", fs)
	}
}

// TestCloseWaitInAcceptQueue: apache2 at MaxRequestWorkers 16 behind a
// slow backend (the corpus case "apache2 at MaxRequestWorkers, queue not
// full"): clients give up while waiting in its accept queue, and their
// connections sit there in CLOSE_WAIT, never accepted and owned by no
// one, for the whole window. No process can close them: not a leak. More
// ownerless CLOSE_WAIT than the queue holds still are, less the queued.
func TestCloseWaitInAcceptQueue(t *testing.T) {
	snap := func(at int64, queue uint32, cw int) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Taken: time.Unix(at, 0), Netns: snapshot.Netns{Name: "apa"}}
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8082")), RecvQ: queue, SendQ: 511, Cookie: 1, Pids: snapshot.PidsOf(100)})
		for i := range cw {
			s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.CloseWait, Cookie: uint64(10 + i),
				Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8082")), Remote: snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.1"), uint16(40000+i))})
		}
		return s
	}
	fs, _ := checkCloseWaitLeak(diag.NewInput(snap(10, 184, 120), snap(13, 184, 168), diag.Options{}))
	if len(fs) != 0 {
		t.Errorf("CLOSE_WAIT inside the accept queue called a leak: %+v", fs)
	}
	fs, _ = checkCloseWaitLeak(diag.NewInput(snap(10, 20, 150), snap(13, 20, 150), diag.Options{}))
	if len(fs) != 1 || !strings.Contains(fs[0].Summary, "holds 130 CLOSE_WAIT") {
		t.Errorf("150 ownerless, 20 queued: want one finding for 130: %+v", fs)
	}
}

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

// readerPair is curl reading a download from a local nginx: the reader's
// socket with recvQ unread of received bytes so far, and nginx's with
// sendQ unacknowledged.
func readerPair(at time.Time, received uint64, recvQ, sendQ uint32) *snapshot.Snapshot {
	cli, srv := netip.MustParseAddrPort("127.0.0.1:60610"), netip.MustParseAddrPort("127.0.0.1:8080")
	return &snapshot.Snapshot{Taken: at, Netns: snapshot.Netns{Name: "t"},
		Sockets: []snapshot.Socket{
			{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(srv), Cookie: 1, Pids: snapshot.PidsOf(20)},
			{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(cli), Remote: snapshot.EndpointOf(srv), RecvQ: recvQ, Cookie: 2, Pids: snapshot.PidsOf(10),
				Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: 232, BytesReceived: received, RcvMSS: 65483}), Mem: &snapshot.MemInfo{RmemAlloc: recvQ + recvQ/8, Rcvbuf: 1 << 21}},
			{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(srv), Remote: snapshot.EndpointOf(cli), SendQ: sendQ, Cookie: 3, Pids: snapshot.PidsOf(20),
				Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: 232}), Mem: &snapshot.MemInfo{Sndbuf: 1 << 21}},
		},
		Procs: map[int]*snapshot.Proc{10: {Pid: 10, Command: "curl", FDs: 5}, 20: {Pid: 20, Command: "nginx", FDs: 9}},
	}
}

// TestSlowReaderWholeTransferBuffered: a reader slower than its sender
// on purpose (curl --limit-rate) holds a whole download in its buffer:
// nothing more arrives, but it reads, and nothing is held back.
func TestSlowReaderWholeTransferBuffered(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	for _, c := range []struct {
		name      string
		prev, cur *snapshot.Snapshot
		sev       diag.Severity
		text      string
	}{
		{"all arrived, read at 200K/s", readerPair(t0, 4_000_000, 2_300_000, 0), readerPair(t1, 4_000_000, 1_300_000, 0), diag.Info, "has sent all it had"},
		{"all arrived, nothing read", readerPair(t0, 4_000_000, 1_300_000, 0), readerPair(t1, 4_000_000, 1_300_000, 0), diag.Warning, "has sent all it had"},
		{"sender waiting, nothing read", readerPair(t0, 4_000_000, 1_300_000, 900_000), readerPair(t1, 4_000_000, 1_300_000, 900_000), diag.Critical, "is held back by the shrinking window"},
		// Still arriving: a sender into an open window on loopback is
		// acknowledged at once (Send-Q 0) but is not done; the reader read
		// nothing while it waits.
		{"still arriving, nothing read", readerPair(t0, 3_000_000, 1_300_000, 0), readerPair(t1, 3_000_000+100_000, 1_400_000, 0), diag.Critical, "is held back by the shrinking window"},
	} {
		res := runRule(slowReader(), c.prev, c.cur)
		if len(res.Findings) != 1 {
			t.Errorf("%s: findings %+v", c.name, res.Findings)
			continue
		}
		f := res.Findings[0]
		if f.Severity != c.sev || !strings.Contains(f.Summary, c.text) {
			t.Errorf("%s: %v %q, want %v and %q", c.name, f.Severity, f.Summary, c.sev, c.text)
		}
	}
}

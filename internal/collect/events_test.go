// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

type fakeEvents struct {
	r   *bpfsource.Reading
	err error
}

func (f fakeEvents) Read() (*bpfsource.Reading, error) { return f.r, f.err }

func TestAddEvents(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &bpfsource.Reading{Since: t0, Until: t0.Add(5 * time.Second), LostFlows: 2, ByNetns: map[uint64][]bpfsource.Flow{
		7: {
			{Pid: 9, Comm: "b", Peer: netip.MustParseAddrPort("10.0.0.2:80"), Opens: 1},
			{Pid: 3, Comm: "a", Peer: netip.MustParseAddrPort("10.0.0.1:80"), FailedPorts: 4, Lifetimes: 2, LifetimeTotal: time.Second},
		},
		8: {{Pid: 1, Comm: "other"}},
	}}
	snaps := []*snapshot.Snapshot{{Netns: snapshot.Netns{Name: "x", Inode: 7}}, {Netns: snapshot.Netns{Name: "y", Inode: 99}}}
	AddEvents(fakeEvents{r: r}, snaps...)
	ev := snaps[0].Events
	if ev == nil || len(ev.Flows) != 2 || ev.Flows[0].Pid != 3 || ev.Flows[0].FailedPorts != 4 || ev.Flows[0].Ended != 2 ||
		ev.Flows[0].Lifetime != time.Second || ev.Lost != 2 || ev.Interval() != 5*time.Second {
		t.Errorf("events = %+v", ev)
	}
	if ev := snaps[1].Events; ev == nil || len(ev.Flows) != 0 {
		t.Errorf("quiet namespace: events = %+v, want an empty section", ev)
	}
	snaps = []*snapshot.Snapshot{{Netns: snapshot.Netns{Name: "x", Inode: 7}}}
	AddEvents(fakeEvents{err: errors.New("bpfsource: read flows: boom")}, snaps...)
	if snaps[0].Events != nil || len(snaps[0].Errors) != 1 || snaps[0].Errors[0].Source != snapshot.SourceBPF {
		t.Errorf("failed read: events %+v, errors %+v", snaps[0].Events, snaps[0].Errors)
	}
}

func TestAddEventsCounters(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ovf := netip.MustParseAddrPort("0.0.0.0:8080")
	r := &bpfsource.Reading{Since: t0, Until: t0.Add(time.Second), LostFlows: 1, LostDrops: 2, LostResets: 3, LostRetransmits: 4,
		Drops: map[uint64][]bpfsource.Drop{7: {{Reason: "NO_SOCKET", Count: 2}, {Reason: "TCP_LISTEN_OVERFLOW", Listener: ovf, Count: 380}}},
		Resets: map[uint64][]bpfsource.Reset{7: {
			{Sent: false, Peer: netip.MustParseAddrPort("10.0.0.9:0"), LocalPort: 8080, Count: 5},
			{Sent: true, Reason: "TCP_STATE", Peer: netip.MustParseAddrPort("10.0.0.5:80"), Count: 7},
		}},
		Retransmits: map[uint64][]bpfsource.Retransmit{7: {
			{Peer: netip.MustParseAddrPort("10.0.0.5:80"), Count: 9},
			{Peer: netip.MustParseAddrPort("10.0.0.5:80"), SYN: true, Count: 3},
		}},
		Missing: []bpfsource.Missing{{Program: "tcp_send_reset", Reason: "no reason argument"}},
		Skipped: map[string]uint64{"kfree_skb": 2, "inet_sock_set_state": 5},
	}
	snaps := []*snapshot.Snapshot{{Netns: snapshot.Netns{Inode: 7}}}
	AddEvents(fakeEvents{r: r}, snaps...)
	ev := snaps[0].Events
	if ev.Lost != 10 || len(ev.Drops) != 2 || ev.Drops[1] != (snapshot.EventDrop{Reason: "TCP_LISTEN_OVERFLOW", Listener: ovf, Count: 380}) {
		t.Errorf("drops: %+v lost %d", ev.Drops, ev.Lost)
	}
	if len(ev.Resets) != 2 || !ev.Resets[0].Sent || ev.Resets[0].Reason != "TCP_STATE" || ev.Resets[1].LocalPort != 8080 {
		t.Errorf("resets (sent first): %+v", ev.Resets)
	}
	if len(ev.Retransmits) != 2 || !ev.Retransmits[0].SYN || ev.Retransmits[1].Count != 9 {
		t.Errorf("retransmits (SYN first): %+v", ev.Retransmits)
	}
	if ev.Has(snapshot.ProgResetsSent) || !ev.Has(snapshot.ProgDrops) || len(ev.Missing) != 1 {
		t.Errorf("missing: %+v", ev.Missing)
	}
	if want := []snapshot.EventProgramSkipped{{Program: "inet_sock_set_state", Runs: 5}, {Program: "kfree_skb", Runs: 2}}; !slices.Equal(ev.Skipped, want) {
		t.Errorf("skipped (by program): %+v, want %+v", ev.Skipped, want)
	}
}

// TestAttributeFailures: connects the network ended (pid 0 in the
// kernel) go to the one process that opened connections to the same
// destination; with several openers of one command they keep that
// command; with openers of two commands, or none, they stay unknown.
func TestAttributeFailures(t *testing.T) {
	a := netip.MustParseAddrPort("127.0.0.1:1")
	b := netip.MustParseAddrPort("10.0.0.9:5432")
	c := netip.MustParseAddrPort("10.0.0.7:80")
	d := netip.MustParseAddrPort("127.0.0.1:8090")
	got := attributeFailures([]snapshot.EventFlow{
		{Remote: a, Refused: 5},
		{Remote: b, TimedOut: 2},
		{Remote: c, Unreachable: 1},
		{Remote: d, Refused: 2},
		{Pid: 3, Command: "curl", Remote: a, Opens: 5},
		{Pid: 4, Command: "app", Remote: b, Opens: 1},
		{Pid: 5, Command: "other", Remote: b, Opens: 1},
		{Pid: 6, Command: "curl", Remote: d, Opens: 1},
		{Pid: 7, Command: "curl", Remote: d, Opens: 1},
	})
	want := []snapshot.EventFlow{
		{Remote: b, TimedOut: 2},
		{Remote: c, Unreachable: 1},
		{Command: "curl", Remote: d, Refused: 2}, // two curls: the command, not a pid
		{Pid: 3, Command: "curl", Remote: a, Opens: 5, Refused: 5},
		{Pid: 4, Command: "app", Remote: b, Opens: 1},
		{Pid: 5, Command: "other", Remote: b, Opens: 1},
		{Pid: 6, Command: "curl", Remote: d, Opens: 1},
		{Pid: 7, Command: "curl", Remote: d, Opens: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("flow %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

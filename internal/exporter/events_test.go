// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func eventsSnap(taken time.Time, ev *snapshot.Events) *snapshot.Snapshot {
	return &snapshot.Snapshot{Taken: taken, Netns: snapshot.Netns{Name: "host", Inode: 1}, Events: ev,
		Sockets: []snapshot.Socket{{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:8080"))}}}
}

func TestEventCounters(t *testing.T) {
	x := NewTested(nil, Options{Top: 2, Clock: fixedClock})
	t0 := time.Unix(1000, 0)
	dst := func(i int) netip.AddrPort { return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 80) }
	ev := &snapshot.Events{
		Drops: []snapshot.EventDrop{{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380},
			{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:9090"), Count: 5}, {Reason: "NO_SOCKET", Count: 2}},
		Resets: []snapshot.EventReset{{Sent: true, Reason: "TCP_STATE", Remote: dst(1), Count: 7}, {Remote: dst(1), Count: 3}},
		Retransmits: []snapshot.EventRetransmit{{Remote: dst(1), Count: 10}, {Remote: dst(1), SYN: true, Count: 1},
			{Remote: dst(2), SYN: true, Count: 1}, {Remote: dst(3), SYN: true, Count: 1}},
		// Refused health checks to three closed ports (Top 2): they keep
		// their own bound and never push the port-exhausted destination
		// into "other", nor count as EADDRNOTAVAIL.
		Flows: []snapshot.EventFlow{{Remote: dst(7), Refused: 9}, {Remote: dst(8), Refused: 9}, {Remote: dst(9), Refused: 9},
			{Remote: dst(1), Opens: 50, FailedPorts: 4, TimedOut: 1, Unreachable: 2, Abandoned: 3}},
	}
	x.Update([]*snapshot.Snapshot{eventsSnap(t0, ev)}, time.Millisecond)
	x.Update([]*snapshot.Snapshot{eventsSnap(t0.Add(5*time.Second), ev)}, time.Millisecond)
	reg, err := NewRegistry(x.Exporter)
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tcpdoctor_bpf_listen_overflow_drops_total Handshakes a listener dropped because its accept queue was full (kfree_skb TCP_LISTEN_OVERFLOW with the listener), first Top listeners, the rest under listener="other".
# TYPE tcpdoctor_bpf_listen_overflow_drops_total counter
tcpdoctor_bpf_listen_overflow_drops_total{container="",listener="0.0.0.0:8080",namespace="",netns="host",pod=""} 760
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tcpdoctor_bpf_listen_overflow_drops_total"); err != nil {
		t.Errorf("overflow by listener (9090 is not listening: dropped): %v", err)
	}
	n, err := testutil.GatherAndCount(reg, "tcpdoctor_bpf_syn_retransmits_total")
	if err != nil || n != 3 {
		t.Errorf("SYN retransmit series = %d, %v; want 3 (Top 2 and other)", n, err)
	}
	text := dropEmpty(scrape(t, reg))
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{`tcpdoctor_bpf_drops_total{netns="host",reason="TCP_LISTEN_OVERFLOW"}`, 770},
		{`tcpdoctor_bpf_drops_total{netns="host",reason="NO_SOCKET"}`, 4},
		{`tcpdoctor_bpf_resets_total{direction="sent",netns="host",reason="TCP_STATE"}`, 14},
		{`tcpdoctor_bpf_resets_total{direction="received",netns="host"}`, 6}, // reason "" is absent,
		{`tcpdoctor_bpf_retransmits_total{netns="host"}`, 20},
		{`tcpdoctor_bpf_syn_retransmits_total{dst="other",netns="host"}`, 2},
		{`tcpdoctor_bpf_connects_total{netns="host"}`, 100},
		{`tcpdoctor_bpf_failed_connects_total{dst="10.0.0.1:80",errno="EADDRNOTAVAIL",netns="host"}`, 8},
		{`tcpdoctor_bpf_failed_connects_total{dst="10.0.0.1:80",errno="ETIMEDOUT",netns="host"}`, 2},
		{`tcpdoctor_bpf_failed_connects_total{dst="10.0.0.1:80",errno="unreachable",netns="host"}`, 4},
		{`tcpdoctor_bpf_failed_connects_total{dst="10.0.0.1:80",errno="abandoned",netns="host"}`, 6},
		{`tcpdoctor_bpf_failed_connects_total{dst="10.0.0.7:80",errno="ECONNREFUSED",netns="host"}`, 18},
		{`tcpdoctor_bpf_failed_connects_total{dst="other",errno="ECONNREFUSED",netns="host"}`, 18},
	} {
		if line := fmt.Sprintf("%s %v\n", c.metric, c.want); !strings.Contains(text, line) {
			t.Errorf("scrape lacks %q:\n%s", line, text)
		}
	}
	// Destinations that stop moving expire; without events nothing is
	// exported (absent, not zero).
	for i := 2; i < 2+idleCollections+1; i++ {
		x.Update([]*snapshot.Snapshot{eventsSnap(t0.Add(time.Duration(i)*5*time.Second), &snapshot.Events{})}, time.Millisecond)
	}
	if strings.Contains(text, `errno="EADDRNOTAVAIL",netns="host"} 8`) && strings.Count(text, `errno="EADDRNOTAVAIL"`) != 1 {
		t.Errorf("refused connects exported as EADDRNOTAVAIL:\n%s", text)
	}
	if n, _ := testutil.GatherAndCount(reg, "tcpdoctor_bpf_syn_retransmits_total", "tcpdoctor_bpf_failed_connects_total"); n != 0 {
		t.Errorf("%d idle destination series still exported", n)
	}
	x.Update([]*snapshot.Snapshot{eventsSnap(t0.Add(time.Minute), nil)}, time.Millisecond)
	if n, _ := testutil.GatherAndCount(reg, "tcpdoctor_bpf_drops_total"); n != 0 {
		t.Errorf("%d drop series without the eBPF source", n)
	}
}

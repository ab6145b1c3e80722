// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEventsRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Snapshot{Taken: t0, Netns: Netns{Name: "host"}, Events: &Events{Since: t0.Add(-5 * time.Second), Until: t0, Lost: 1, Flows: []EventFlow{
		{Pid: 812, Command: "nginx", Remote: netip.MustParseAddrPort("10.0.0.5:8080"), Opens: 500, FailedPorts: 412, Ended: 88, Lifetime: time.Second},
		{Pid: 812, Command: "nginx", Remote: netip.MustParseAddrPort("0.0.0.0:0"), LocalPort: 443, ActiveCloses: 7},
	},
		Drops: []EventDrop{{Reason: "NO_SOCKET", Count: 3}, {Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380}},
		Resets: []EventReset{{Sent: true, Reason: "TCP_STATE", Remote: netip.MustParseAddrPort("10.0.0.5:8080"), Count: 7},
			{Remote: netip.MustParseAddrPort("10.0.0.9:0"), LocalPort: 443, Count: 2}},
		Retransmits: []EventRetransmit{{Remote: netip.MustParseAddrPort("10.0.0.5:8080"), SYN: true, Count: 4}},
		Missing:     []EventProgram{{Program: ProgResetsReceived, Reason: "kernel has no tcp_receive_reset tracepoint"}},
	}}
	got, err := ReadAll(written(t, s))
	if err != nil || len(got) != 1 {
		t.Fatalf("ReadAll = %v, %v", got, err)
	}
	if !reflect.DeepEqual(got[0].Events, s.Events) {
		t.Errorf("events = %+v, want %+v", got[0].Events, s.Events)
	}
	if got[0].Events.Has(ProgResetsReceived) || !got[0].Events.Has(ProgDrops) || (*Events)(nil).Has(ProgDrops) {
		t.Error("Has wrong")
	}
	if !got[0].Events.Flows[1].Accepted() || got[0].Events.Flows[0].Accepted() {
		t.Error("Accepted() wrong")
	}
	// A file from before the section reads with no events.
	old := `{"format":"tcpdoctor-snapshot","version":1,"tool":"tcpdoctor old"}` + "\n" +
		`{"taken":"2026-01-01T00:00:00Z","netns":{"name":"host"},"sockets":[]}` + "\n"
	got, err = ReadAll(strings.NewReader(old))
	if err != nil || len(got) != 1 || got[0].Events != nil {
		t.Fatalf("old file: %+v, %v", got, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// What the rules keep of a window's first sample is tallied from the
// whole sample, though the base keeps its established connections only
// as snapshot.Was records.
func TestKeptOfFirstSample(t *testing.T) {
	ap := netip.MustParseAddrPort
	ln := snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: 1, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Pids: snapshot.PidsOf(10)}
	acc := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 2, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40000")), Pids: snapshot.PidsOf(10)}
	cli := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 3, Local: snapshot.EndpointOf(ap("198.18.0.1:40001")), Remote: snapshot.EndpointOf(ap("198.18.0.3:443")), Pids: snapshot.PidsOf(20), RecvQ: 7}
	tw := snapshot.Socket{Family: 2, State: snapshot.TimeWait, Cookie: 4, Local: snapshot.EndpointOf(ap("198.18.0.1:40002")), Remote: snapshot.EndpointOf(ap("198.18.0.3:443"))}
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{ln, acc, cli, tw},
		Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "32768 60999"}}
	in := diag.NewInputFrom(diag.NewBase(s, diag.KeepsOf(All())), &snapshot.Snapshot{Sockets: []snapshot.Socket{cli}}, diag.Options{})
	if got, ok := diag.KeptOf(in, acceptedOwned{}); !ok || got[1] != 1 {
		t.Errorf("accepted on the listener: %v %v, want 1", got, ok)
	}
	if got := prevOpener(in, tcpmodel.FlowOf(cli.Local.Addr(), cli.Remote.AddrPort())); got != 20 {
		t.Errorf("opener of the client flow: %d, want 20", got)
	}
	if got := prevOpener(in, tcpmodel.FlowOf(acc.Local.Addr(), acc.Remote.AddrPort())); got != 0 {
		t.Errorf("an accepted connection counted as opened by its server: %d", got)
	}
	held, ok := diag.KeptOf(in, portsHeld{})
	if k := tcpmodel.DestOf(cli.Local.Addr(), cli.Remote.AddrPort()); !ok || held[k] != 2 {
		t.Errorf("held: %v %v, want 2 to %v (one open, one in TIME_WAIT)", held, ok, k)
	}
	delete(s.Sysctls, "net.ipv4.ip_local_port_range")
	if held, ok := diag.KeptOf(diag.NewInput(s, s, diag.Options{}), portsHeld{}); !ok || held != nil {
		t.Errorf("held known without the port range: %v", held)
	}
}

// Each rule lists in its Keeps everything it reads of the window's first
// sample (diag.KeptOf): over every fixture, a base keeping only what the
// rule lists gives the findings the whole first sample gives. A key a
// rule reads but does not list makes it unknown ("was not kept").
func TestRulesKeepWhatTheyRead(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	windows, kept := 0, 0
	for _, path := range files {
		snaps := readSnaps(t, path)
		if len(snaps) < 2 {
			continue
		}
		windows++
		prev, cur := snaps[0], snaps[len(snaps)-1]
		for _, r := range All() {
			kept += len(r.Keeps)
			var whole, base diag.Result
			diag.Run([]diag.Rule{r}, diag.NewInput(prev, cur, diag.Options{}), &whole)
			diag.Run([]diag.Rule{r}, diag.NewInputFrom(diag.NewBase(prev, r.Keeps), cur, diag.Options{}), &base)
			if w, b := resultJSON(t, whole), resultJSON(t, base); w != b {
				t.Errorf("%s, rule %s: findings differ when the base keeps only the rule's Keeps:\nwhole %s\nbase  %s", path, r.ID, w, b)
			}
		}
	}
	if windows == 0 || kept == 0 {
		t.Errorf("%d fixture windows, %d keys kept: the test compares nothing", windows, kept)
	}
}

func resultJSON(t *testing.T, res diag.Result) string {
	t.Helper()
	res.Sort()
	b, err := json.Marshal(struct {
		F []diag.Finding
		U []diag.Unknown
	}{res.Findings, res.Unknown})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// A finding whose connection's other end is a pod on this host, in
// another namespace of the same collection, carries peer_pod and
// peer_namespace; one without keeps them empty (absent to Prometheus).
// The recording of a sender and its local receiver (internal/rules'
// rwnd-limited fires-local) is split in two namespaces, the receiver's
// process in pod shop/web-1.
func TestPeerLabels(t *testing.T) {
	f, err := os.Open("../rules/testdata/rwnd-limited/fires-local.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil || len(snaps) < 2 {
		t.Fatalf("%d snapshots: %v", len(snaps), err)
	}
	var local, remote snapshot.Endpoint
	var tb snapshot.TCPInfo
	for _, sk := range snaps[len(snaps)-1].Sockets {
		if ti := sk.TCP(&tb); sk.State == snapshot.Established && ti != nil && ti.BytesAcked > 1e6 {
			local, remote = sk.Local, sk.Remote
		}
	}
	a, b := netip.MustParseAddr("198.18.7.1"), netip.MustParseAddr("198.18.7.2")
	split := func(s *snapshot.Snapshot) []*snapshot.Snapshot {
		snd, rcv := *s, *s
		snd.Netns = snapshot.Netns{Name: "sender", Inode: 11}
		rcv.Netns = snapshot.Netns{Name: "shop/web-1", Inode: 12}
		snd.Sockets, rcv.Sockets = nil, nil
		for _, sk := range s.Sockets {
			switch {
			case sk.Local == local && sk.Remote == remote:
				sk.Local, sk.Remote = snapshot.EndpointFrom(a, local.Port()), snapshot.EndpointFrom(b, remote.Port())
				snd.Sockets = append(snd.Sockets, sk)
			case sk.Local == remote && sk.Remote == local:
				sk.Local, sk.Remote = snapshot.EndpointFrom(b, remote.Port()), snapshot.EndpointFrom(a, local.Port())
				rcv.Sockets = append(rcv.Sockets, sk)
			}
		}
		rcv.Procs = map[int]*snapshot.Proc{}
		for pid, p := range s.Procs {
			q := *p
			q.Workload = &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}
			rcv.Procs[pid] = &q
		}
		return []*snapshot.Snapshot{&snd, &rcv}
	}
	r, ok := rules.ByID("rwnd-limited")
	if !ok {
		t.Fatal("no rwnd-limited")
	}
	x := NewTested([]diag.Rule{r}, Options{Clock: fixedClock})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	x.Update(split(snaps[0]), 100*time.Millisecond)
	x.Update(split(snaps[len(snaps)-1]), 100*time.Millisecond)
	out := scrape(t, reg)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "tcpdoctor_finding{") {
			line = l
		}
	}
	if !strings.Contains(line, `netns="sender"`) || !strings.Contains(line, `peer_pod="web-1"`) || !strings.Contains(line, `peer_namespace="shop"`) || !strings.Contains(line, `rule="rwnd-limited"`) {
		t.Errorf("finding series %q, want the sender's rwnd-limited with peer_pod web-1, peer_namespace shop\n%s", line, out)
	}
}

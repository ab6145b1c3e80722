// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"net/netip"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// TestBothEndsOnOneHost: a bulk sender in one namespace and its receiver,
// pinned at SO_RCVBUF 8K, in another namespace of the same host (the
// lab's client and server namespaces, 198.18.x addresses, through a
// 20 ms, 100 Mbit/s emulated link), diagnosed together as check
// --all-netns does (window.Sample, window.Inputs, report.Diagnose). The
// sender's rwnd-limited finding names the receiver (its namespace,
// address and process, as subject.peer in JSON), its pinned receive
// buffer, and addresses the receiver's fixes to it by name; before, it
// said only "the remote receiver".
func TestBothEndsOnOneHost(t *testing.T) {
	t.Run("link", func(t *testing.T) {
		bothEnds(t, newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 100e6, RateDown: 100e6}), 8<<10, "pinned at 16K (SO_RCVBUF 8K)")
	})
	// Two namespaces of internal/testkit/testns joined by a veth pair, no delay:
	// the smallest receive buffer holds the flow below 1 Gbit/s.
	t.Run("veth", func(t *testing.T) {
		bothEnds(t, vethPair(t), 2048, "(SO_RCVBUF 2K)")
	})
}

// vethPair is two namespaces of internal/testkit/testns joined by a veth pair,
// 198.18.7.1 and 198.18.7.2.
func vethPair(t *testing.T) path {
	a, b := testns.New(t, "peera"), testns.New(t, "peerb")
	testns.Run(t, "ip", "-n", a.Name, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b.Name)
	testns.Run(t, "ip", "-n", a.Name, "addr", "add", "198.18.7.1/24", "dev", "va")
	testns.Run(t, "ip", "-n", b.Name, "addr", "add", "198.18.7.2/24", "dev", "vb")
	testns.Run(t, "ip", "-n", a.Name, "link", "set", "va", "up")
	testns.Run(t, "ip", "-n", b.Name, "link", "set", "vb", "up")
	return path{client: a, server: b, cli: netip.MustParseAddr("198.18.7.1"), srv: netip.MustParseAddr("198.18.7.2")}
}

// bothEnds runs the sender in p.client against a receiver in p.server
// whose listener asked SO_RCVBUF rcvbuf, and checks the finding; pinned
// is what its summary says of the receiver's buffer.
func bothEnds(t *testing.T, p path, rcvbuf int, pinned string) {
	c, s, local, srv := pairAcross(t, p, nil, setBuf(unix.SO_RCVBUF, rcvbuf))
	loop(t, []int{c, s}, writer(c))
	loop(t, []int{c, s}, reader(s, 256<<10, 0))
	time.Sleep(time.Second)
	col := &collect.Collector{Opts: collect.Options{Owners: true, BufLock: true}, Now: time.Now}
	rs := rules.All()
	sleep := func(ctx context.Context, d time.Duration) error { time.Sleep(d); return nil }
	var f *diag.Finding
	var b []byte
	for try := 1; try <= 3 && f == nil; try++ {
		ss, err := window.Sample(context.Background(), col, []netns.NS{p.client, p.server}, 2, 1500*time.Millisecond, sleep, rs)
		if err != nil {
			t.Fatal(err)
		}
		rep := report.Diagnose(window.Inputs(ss, diag.Options{}), rs)
		if b, err = json.MarshalIndent(rep.Findings, "", "  "); err != nil {
			t.Fatal(err)
		}
		for i := range rep.Findings {
			if x := &rep.Findings[i]; x.Rule == "rwnd-limited" && x.Subject.Local.String() == local.String() {
				f = x
			}
		}
	}
	if f == nil {
		t.Fatalf("no rwnd-limited finding for the sender %s:\n%s", local, b)
	}
	t.Logf("%s %s", f.Severity, f.Summary)
	pe := f.Subject.Peer
	if pe == nil {
		t.Fatalf("subject names no peer on this host: %+v\n%s", f.Subject, b)
	}
	if pe.Netns != p.server.Name || pe.Local.String() != srv.String() || pe.Pid != os.Getpid() || pe.Command == "" {
		t.Errorf("peer %+v, want netns %s, %s, pid %d", *pe, p.server.Name, srv, os.Getpid())
	}
	if !strings.Contains(f.Summary, "on this host") || !strings.Contains(f.Summary, "netns "+p.server.Name) ||
		!strings.Contains(f.Summary, pinned) {
		t.Errorf("summary does not name the receiver and its pinned buffer: %s", f.Summary)
	}
	addressed := false
	for _, fx := range f.Fixes {
		addressed = addressed || fx.Peer && strings.Contains(fx.Text, "stop pinning the receive buffer") && strings.Contains(fx.Text, pe.String())
	}
	if !addressed {
		t.Errorf("no fix addressed to %s:\n%s", pe, b)
	}
}

// SPDX-License-Identifier: Apache-2.0

package window

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// established keeps how many established connections the whole first
// sample held, which its base keeps only as records.
type established struct{}

func (established) Keep(s *snapshot.Snapshot) int {
	n := 0
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Established {
			n++
		}
	}
	return n
}

// unlisted is a key no rule here lists.
type unlisted struct{}

func (unlisted) Keep(*snapshot.Snapshot) int { return 1 }

// keeping is a rule that reads established of the first sample.
func keeping() []diag.Rule {
	return []diag.Rule{{ID: "keeping", Keeps: []diag.Keeper{diag.Keep(established{})}, Check: func(*diag.Input) ([]diag.Finding, error) { return nil, nil }}}
}

func sampleAt(name string, inode uint64, at int64, cookies ...uint64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Netns: snapshot.Netns{Name: name, Inode: inode}, Taken: time.Unix(at, 0)}
	ap := netip.MustParseAddrPort
	s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Listen, Cookie: 1, Local: snapshot.EndpointOf(ap("198.18.0.1:80"))})
	for _, c := range cookies {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Established, Cookie: c, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40000")), RecvQ: uint32(c)})
	}
	return s
}

// A Chain starts each namespace's next window at its latest sample,
// kept as what the rules list, and has no window for a first sample, a
// clock gone backwards or a name that now belongs to another namespace.
func TestChain(t *testing.T) {
	ch := NewChain(keeping())
	first := sampleAt("a", 7, 10, 2, 3)
	if in := ch.Input(first, diag.Options{}); in != nil {
		t.Fatal("a window from a first sample")
	}
	ch.Keep([]*snapshot.Snapshot{first, sampleAt("a", 7, 10, 9)})
	if ch.Len() != 1 || ch.Base("a") == nil || len(ch.Base("a").Was) != 3 {
		t.Fatalf("kept %d namespaces, a: %+v; want the first sample of a's name", ch.Len(), ch.Base("a"))
	}
	cur := sampleAt("a", 7, 12, 3, 4)
	in := ch.Input(cur, diag.Options{})
	if in == nil || in.Window() != 2*time.Second {
		t.Fatalf("window %+v", in)
	}
	if n, ok := diag.KeptOf(in, established{}); !ok || n != 2 {
		t.Errorf("kept %d %v, want the first sample's 2 connections", n, ok)
	}
	if len(in.Prev.Sockets) != 1 {
		t.Errorf("the base keeps %d sockets whole, want the listener alone", len(in.Prev.Sockets))
	}
	if p := in.PrevOf(&in.Cur.Sockets[1]); p == nil || p.RecvQ != 3 {
		t.Errorf("PrevOf the connection both samples hold: %+v", p)
	}
	var res diag.Result
	diag.Run([]diag.Rule{{ID: "reads-unlisted", Check: func(in *diag.Input) ([]diag.Finding, error) {
		diag.KeptOf(in, unlisted{})
		return nil, nil
	}}}, in, &res)
	if len(res.Unknown) != 1 || !strings.Contains(res.Unknown[0].Reason, "was not kept") {
		t.Errorf("a key no rule listed: %+v", res.Unknown)
	}
	for name, s := range map[string]*snapshot.Snapshot{
		"clock backwards":   sampleAt("a", 7, 9, 3),
		"same instant":      sampleAt("a", 7, 10, 3),
		"another namespace": sampleAt("a", 8, 12, 3),
		"unknown name":      sampleAt("b", 7, 12, 3),
	} {
		if in := ch.Input(s, diag.Options{}); in != nil {
			t.Errorf("%s: a window", name)
		}
	}
	ch.Keep([]*snapshot.Snapshot{sampleAt("b", 9, 12)})
	if ch.Base("a") != nil || ch.Len() != 1 {
		t.Errorf("a namespace absent from the collection is still kept (%d)", ch.Len())
	}
}

// Inputs skips series without samples and reads a first sample kept
// whole (a file read back) as Sample's base would keep it.
func TestInputs(t *testing.T) {
	ss := []Series{
		{Netns: "empty"},
		{Netns: "file", Snaps: []*snapshot.Snapshot{sampleAt("file", 1, 10, 2, 3), sampleAt("file", 1, 11, 3)}},
		{Netns: "one", Snaps: []*snapshot.Snapshot{sampleAt("one", 2, 11, 3)}},
	}
	var got []string
	for in := range Inputs(ss, diag.Options{}) {
		n, ok := diag.KeptOf(in, established{})
		got = append(got, in.Cur.Netns.Name)
		switch in.Cur.Netns.Name {
		case "file":
			if !ok || n != 2 || len(in.Prev.Sockets) != 1 {
				t.Errorf("file: kept %d %v, %d whole sockets", n, ok, len(in.Prev.Sockets))
			}
		case "one":
			if ok || in.Prev != nil {
				t.Errorf("one sample: kept %d %v", n, ok)
			}
		}
	}
	if strings.Join(got, ",") != "file,one" {
		t.Errorf("inputs for %v", got)
	}
}

// Sample keeps what the rules list of the first sample, tallied over
// its whole sample though the base holds its connections as records.
func TestSampleKeepsWhatTheRulesList(t *testing.T) {
	ns := testns.New(t, "keep")
	testns.Connections(t, ns, 1)
	c := &collect.Collector{Opts: collect.Options{ProcRoot: "/proc"}, Now: time.Now}
	noSleep := func(context.Context, time.Duration) error { return nil }
	ss, err := Sample(context.Background(), c, []netns.NS{ns}, 2, time.Second, noSleep, keeping())
	if err != nil || len(ss) != 1 || ss[0].Base == nil {
		t.Fatalf("%v %+v", err, ss)
	}
	in := ss[0].Input(diag.Options{})
	if n, ok := diag.KeptOf(in, established{}); !ok || n != 2 {
		t.Errorf("kept %d %v, want both ends of the connection", n, ok)
	}
	if len(in.Prev.Sockets) != 1 {
		t.Errorf("the base holds %d sockets whole, want the listener alone", len(in.Prev.Sockets))
	}
}

// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// fakeTracer stands in for trace.Live: it records each request and, when
// hold is set, waits for release (or ctx) before returning a trace of
// points points of one connection.
type fakeTracer struct {
	mu      sync.Mutex
	reqs    []TraceRequest
	hold    bool
	release chan struct{}
	points  int
	err     error
}

func (f *fakeTracer) run(ctx context.Context, req TraceRequest) (*trace.Trace, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	hold, release := f.hold, f.release
	f.mu.Unlock()
	if hold {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	tr := &trace.Trace{Header: trace.Header{Trace: trace.Version, Started: time.Unix(1_700_000_000, 0).UTC(), Interval: 10 * time.Millisecond, Netns: req.Subject.Netns}}
	local, _ := req.Subject.Local.AddrPort()
	c := &trace.Conn{ID: 1, Local: local, Remote: netip.MustParseAddrPort("10.0.0.2:5000"), Cookie: 7}
	for i := range f.points {
		// Counters that do not repeat, so the file does not compress to
		// nothing.
		c.Points = append(c.Points, trace.Point{T: time.Duration(i+1) * 10 * time.Millisecond, Conn: 1, State: snapshot.Established,
			Acked: uint64(i) * 7919 * 7919, RTT: uint32(i*104729) % 99991, Rate: uint64(i) * 15485863})
	}
	tr.Conns = []*trace.Conn{c}
	return tr, nil
}

func (f *fakeTracer) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// warn is a finding of rule at sev on the connection from local to
// 10.0.0.2:5000 in namespace "a".
func warn(rule string, sev diag.Severity, local string) diag.Finding {
	return diag.Finding{Rule: rule, Severity: sev, Subject: diag.Subject{Netns: "a", Local: diag.MustParseAddress(local), Remote: diag.MustParseAddress("10.0.0.2:5000")}, Summary: rule}
}

// settle waits for r's trace to be recorded and written.
func settle(r *Recorder) {
	r.traceWG.Wait()
	r.Sync()
}

// traceFiles lists the trace files in dir.
func traceFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "trace-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The bounds: only Traceable rules at warning or above start a trace; one
// records at a time; a subject waits out its cool-down; at most PerHour
// start in any hour. Each trace is named in its window's finding, kept
// as a gzip trace file that reads back, and listed with its incident.
func TestTriggeredTraceBounds(t *testing.T) {
	dir := t.TempDir()
	ft := &fakeTracer{points: 5}
	r := New(Options{Dir: dir, EvidenceEvery: time.Hour,
		Trace: &TraceOptions{Duration: 5 * time.Second, PerHour: 3, Cooldown: 10 * time.Minute, Rules: rules.All(), Run: ft.run}})
	sec := 0
	add := func(fs ...diag.Finding) {
		t.Helper()
		sec += 15
		r.Add([]*snapshot.Snapshot{at("a", sec)}, &report.Report{Findings: fs})
	}
	add() // the first sample: no window
	steps := []struct {
		fs     []diag.Finding
		hold   bool // the trace started (if any) goes on into the next step
		starts int  // traces started by this window
		why    string
	}{
		{[]diag.Finding{warn("slow-reader", diag.Info, "10.0.0.1:80")}, false, 0, "info"},
		{[]diag.Finding{warn("listen-overflow", diag.Critical, "10.0.0.1:80")}, false, 0, "not a rule traces explain"},
		{[]diag.Finding{warn("slow-reader", diag.Warning, "10.0.0.1:80")}, true, 1, "slow-reader warns"},
		{[]diag.Finding{warn("rwnd-limited", diag.Critical, "10.0.0.1:81")}, false, 0, "one at a time: the first still records"},
		{[]diag.Finding{warn("slow-reader", diag.Warning, "10.0.0.1:80"), warn("sndbuf-limited", diag.Warning, "10.0.0.1:82")}, false, 1,
			"slow-reader cools down; the next subject gets it"},
		{[]diag.Finding{warn("connection-bottleneck", diag.Warning, "10.0.0.1:83")}, false, 1, "third in the hour"},
		{[]diag.Finding{warn("rwnd-limited", diag.Warning, "10.0.0.1:84")}, false, 0, "per hour: 3 already"},
	}
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		ft.mu.Lock()
		ft.hold, ft.release = s.hold, make(chan struct{})
		release := ft.release
		ft.mu.Unlock()
		before := ft.n()
		add(s.fs...)
		if s.hold {
			// Started: wait until it records, then the next window comes
			// while it still does.
			for ft.n() == before {
				time.Sleep(time.Millisecond)
			}
			// The window's own entries are written before the next comes
			// (the writer holds one; a second while it is busy is dropped).
			r.Sync()
			i++
			s2 := steps[i]
			add(s2.fs...)
			if got := ft.n() - before; got != s.starts+s2.starts {
				t.Errorf("steps %d-%d (%s; %s): %d traces started", i-1, i, s.why, s2.why, got)
			}
			close(release)
			settle(r)
			continue
		}
		settle(r)
		if got := ft.n() - before; got != s.starts {
			t.Errorf("step %d (%s): %d traces started, want %d", i, s.why, got, s.starts)
		}
	}
	// An hour after the first trace there is room again, and the cool-down
	// of the first subject is over.
	sec += 3600
	add()
	settle(r) // or the next window may come while this one is written, and be dropped
	add(warn("slow-reader", diag.Warning, "10.0.0.1:80"))
	settle(r)
	r.Close()

	ft.mu.Lock()
	var locals []string
	for _, q := range ft.reqs {
		locals = append(locals, q.Subject.Local.String())
	}
	first := ft.reqs[0]
	ft.mu.Unlock()
	if want := []string{"10.0.0.1:80", "10.0.0.1:82", "10.0.0.1:83", "10.0.0.1:80"}; !slices.Equal(locals, want) {
		t.Fatalf("traced %v, want %v", locals, want)
	}
	if first.Duration != 5*time.Second || first.Rule != "slow-reader" ||
		!slices.Equal(first.Filter.LPorts, []uint16{80}) || !slices.Equal(first.Filter.RPorts, []uint16{5000}) ||
		first.Filter.Peers[0] != netip.MustParsePrefix("10.0.0.2/32") || first.Filter.Locals[0] != netip.MustParsePrefix("10.0.0.1/32") {
		t.Errorf("first request %+v", first)
	}
	files := traceFiles(t, dir)
	if len(files) != 4 || r.Traces() != 4 || r.Errors() != 0 {
		t.Fatalf("trace files %v, Traces() %d, errors %d", files, r.Traces(), r.Errors())
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		gz, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		tr, err := trace.Read(gz)
		if err != nil || len(tr.Conns) != 1 || len(tr.Conns[0].Points) != 5 {
			t.Errorf("%s: %v %+v", p, err, tr)
		}
	}
	// The timeline names each trace in the finding that started it, and
	// the incident carries the first.
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	es, err := st.Entries(time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, e := range es {
		for _, f := range e.Findings {
			if f.Trace != "" {
				named = append(named, f.Trace)
				if f.Trace != traceName(e.To) {
					t.Errorf("window ending %s names %s", e.To, f.Trace)
				}
			}
		}
	}
	kept := st.Traces()
	if len(named) != 4 || len(kept) != 4 {
		t.Fatalf("timeline names %v; store lists %v", named, kept)
	}
	for _, n := range named {
		if !kept[n] {
			t.Errorf("%s named but not listed", n)
		}
	}
	incs := Incidents(es, Filter{Min: diag.Warning, Rules: []string{"slow-reader"}}, at("a", sec).Taken)
	// Three: the second was within the cool-down of the first.
	if len(incs) != 3 || incs[0].Trace != named[0] || incs[1].Trace != "" || incs[2].Trace != named[3] {
		t.Errorf("slow-reader incidents %+v, want traces %s, none and %s", incs, named[0], named[3])
	}
	if ws := st.Evidence(); slices.ContainsFunc(ws, func(w Window) bool { return strings.HasPrefix(w.Name, tracePrefix) }) {
		t.Errorf("a trace listed as evidence: %+v", ws)
	}
}

// A trace counts in the store's size and goes oldest first like the
// evidence files.
func TestTriggeredTraceEvicted(t *testing.T) {
	dir := t.TempDir()
	const limit = 48 << 10
	ft := &fakeTracer{points: 2000}
	r := New(Options{Dir: dir, MaxBytes: limit, MaxAge: time.Minute, EvidenceEvery: time.Nanosecond,
		Trace: &TraceOptions{Duration: time.Second, PerHour: 100, Cooldown: time.Nanosecond, Rules: rules.All(), Run: ft.run}})
	r.Add([]*snapshot.Snapshot{at("a", 0)}, nil)
	var first string
	var sizes []int64
	for i := 1; i <= 12; i++ {
		r.Add([]*snapshot.Snapshot{at("a", 15*i)}, &report.Report{Findings: []diag.Finding{warn("slow-reader", diag.Warning, "10.0.0.1:80")}})
		settle(r)
		if fs := traceFiles(t, dir); i == 1 && len(fs) == 1 {
			first = filepath.Base(fs[0])
			st, _ := os.Stat(fs[0])
			sizes = append(sizes, st.Size())
		}
	}
	r.Close()
	if first == "" || sizes[0] < limit/8 {
		t.Fatalf("first trace %q, %v bytes: too small to count against %d", first, sizes, limit)
	}
	fs, _ := listFiles(dir)
	var total int64
	traces := 0
	for _, f := range fs {
		total += f.size
		if f.trace {
			traces++
		}
		if f.name == first {
			t.Errorf("the oldest trace %s is still there", first)
		}
	}
	if total > limit || traces == 0 {
		t.Errorf("%d files (%d traces), %d bytes; limit %d", len(fs), traces, total, limit)
	}
	if r.Traces() != 12 {
		t.Errorf("%d traces written, want 12", r.Traces())
	}
}

// A trace that fails is counted as a history error, said in the next
// window's note, and never stops the timeline.
func TestTriggeredTraceFails(t *testing.T) {
	dir := t.TempDir()
	l := &logs{}
	ft := &fakeTracer{err: errors.New("netns \"a\" is no longer collected")}
	r := New(Options{Dir: dir, EvidenceEvery: time.Hour, Logf: l.logf,
		Trace: &TraceOptions{Duration: time.Second, PerHour: 6, Cooldown: time.Hour, Rules: rules.All(), Run: ft.run}})
	r.Add([]*snapshot.Snapshot{at("a", 0)}, nil)
	r.Add([]*snapshot.Snapshot{at("a", 15)}, &report.Report{Findings: []diag.Finding{warn("rwnd-limited", diag.Warning, "10.0.0.1:80")}})
	settle(r)
	r.Add([]*snapshot.Snapshot{at("a", 30)}, &report.Report{})
	r.Close()
	if ft.n() != 1 || r.Errors() != 1 || len(traceFiles(t, dir)) != 0 || l.n() == 0 || !strings.Contains(l.lines[0], "no longer collected") {
		t.Fatalf("%d traces run, %d errors, files %v, log %v", ft.n(), r.Errors(), traceFiles(t, dir), l.lines)
	}
	st, _ := Open(dir)
	es, _ := st.Entries(time.Time{}, time.Time{})
	if len(es) != 2 || !strings.Contains(es[1].Note, "not kept: history: trace trace-") || !strings.Contains(es[1].Note, "no longer collected") {
		t.Errorf("entries %+v", es)
	}
}

// Close ends a trace that is recording and keeps what it recorded.
func TestTriggeredTraceClose(t *testing.T) {
	dir := t.TempDir()
	ft := &fakeTracer{hold: true, release: make(chan struct{}), points: 3}
	r := New(Options{Dir: dir, Trace: &TraceOptions{Duration: time.Hour, PerHour: 6, Cooldown: time.Hour, Rules: rules.All(), Run: ft.run}})
	r.Add([]*snapshot.Snapshot{at("a", 0)}, nil)
	r.Add([]*snapshot.Snapshot{at("a", 15)}, &report.Report{Findings: []diag.Finding{warn("slow-reader", diag.Critical, "10.0.0.1:80")}})
	for ft.n() == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the trace's full hour")
	}
	if n := len(traceFiles(t, dir)); n != 1 {
		t.Errorf("%d trace files after Close", n)
	}
}

func TestSubjectFilter(t *testing.T) {
	for _, c := range []struct {
		s    diag.Subject
		want sockdiag.Filter
		err  bool
	}{
		{diag.Subject{Local: diag.MustParseAddress("10.0.0.1:80"), Remote: diag.MustParseAddress("10.0.0.2:5000")}, sockdiag.Filter{LPorts: []uint16{80}, RPorts: []uint16{5000},
			Locals: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, Peers: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}}, false},
		// A server-side connection-bottleneck: the client's address only.
		{diag.Subject{Local: diag.MustParseAddress("[::1]:80"), Remote: diag.MustParseAddress("::2")}, sockdiag.Filter{LPorts: []uint16{80},
			Locals: []netip.Prefix{netip.MustParsePrefix("::1/128")}, Peers: []netip.Prefix{netip.MustParsePrefix("::2/128")}}, false},
		{diag.Subject{Local: diag.MustParseAddress("[::ffff:10.0.0.1]:80"), Remote: diag.MustParseAddress("[::ffff:10.0.0.2]:9")}, sockdiag.Filter{LPorts: []uint16{80}, RPorts: []uint16{9},
			Locals: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, Peers: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}}, false},
		{diag.Subject{Local: diag.MustParseAddress("10.0.0.1"), Remote: diag.MustParseAddress("10.0.0.2:5000")}, sockdiag.Filter{}, true},
		{diag.Subject{Local: diag.MustParseAddress("10.0.0.1:80")}, sockdiag.Filter{}, true},
		{diag.Subject{Local: diag.MustParseAddress("10.0.0.1:0"), Remote: diag.MustParseAddress("10.0.0.2:1")}, sockdiag.Filter{}, true},
	} {
		got, err := SubjectFilter(c.s)
		if (err != nil) != c.err {
			t.Errorf("%+v: error %v", c.s, err)
			continue
		}
		if err == nil && (!slices.Equal(got.LPorts, c.want.LPorts) || !slices.Equal(got.RPorts, c.want.RPorts) ||
			!slices.Equal(got.Locals, c.want.Locals) || !slices.Equal(got.Peers, c.want.Peers)) {
			t.Errorf("%+v: %+v, want %+v", c.s, got, c.want)
		}
	}
}

// TestSubjectFilterTyped: the filter comes from the subject's typed
// addresses, never from their text: an IPv6 peer named by its address
// alone (which a host:port split of its text reads as "2001:db8:" port
// 50), a zoned link-local address, and a subject in a pod whose
// namespace is named after it select exactly the connection.
func TestSubjectFilterTyped(t *testing.T) {
	pod := &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("a", 64), Container: "api", Pod: "web-1", PodNamespace: "shop"}
	for _, c := range []struct {
		s            diag.Subject
		local, peer  string
		lport, rport uint16
	}{
		{diag.Subject{Netns: "shop/web-1", Workload: pod, Local: diag.At(netip.MustParseAddrPort("[2001:db8::1]:8080")), Remote: diag.Host(netip.MustParseAddr("2001:db8::50"))},
			"2001:db8::1/128", "2001:db8::50/128", 8080, 0},
		{diag.Subject{Local: diag.At(netip.MustParseAddrPort("[fe80::1%eth0]:80")), Remote: diag.At(netip.MustParseAddrPort("[fe80::2%eth0]:40000"))},
			"fe80::1/128", "fe80::2/128", 80, 40000},
		{diag.Subject{Netns: "shop/web-1", Workload: pod, Local: diag.At(netip.MustParseAddrPort("[::ffff:198.18.0.1]:80")), Remote: diag.Host(netip.MustParseAddr("::ffff:198.18.0.2"))},
			"198.18.0.1/32", "198.18.0.2/32", 80, 0},
	} {
		got, err := SubjectFilter(c.s)
		if err != nil {
			t.Errorf("%s: %v", report.SubjectText(c.s), err)
			continue
		}
		want := sockdiag.Filter{Locals: []netip.Prefix{netip.MustParsePrefix(c.local)}, Peers: []netip.Prefix{netip.MustParsePrefix(c.peer)}, LPorts: []uint16{c.lport}}
		if c.rport != 0 {
			want.RPorts = []uint16{c.rport}
		}
		if !slices.Equal(got.LPorts, want.LPorts) || !slices.Equal(got.RPorts, want.RPorts) || !slices.Equal(got.Locals, want.Locals) || !slices.Equal(got.Peers, want.Peers) {
			t.Errorf("%s: %+v, want %+v", report.SubjectText(c.s), got, want)
		}
	}
}

// A rule is traced because it declares itself Traceable, not because of
// its name: a new rule that declares it starts traces, and a traced
// rule's id run without the declaration starts none.
func TestTraceableIsTheRulesDeclaration(t *testing.T) {
	for _, c := range []struct {
		rule  diag.Rule
		warns string
		want  int
	}{
		{diag.Rule{ID: "new-transfer-rule", Traceable: true}, "new-transfer-rule", 1},
		{diag.Rule{ID: "slow-reader"}, "slow-reader", 0},
	} {
		ft := &fakeTracer{points: 1}
		r := New(Options{Dir: t.TempDir(), EvidenceEvery: time.Hour,
			Trace: &TraceOptions{Duration: time.Second, PerHour: 6, Cooldown: time.Hour, Rules: []diag.Rule{c.rule}, Run: ft.run}})
		r.Add([]*snapshot.Snapshot{at("a", 0)}, nil)
		r.Add([]*snapshot.Snapshot{at("a", 15)}, &report.Report{Findings: []diag.Finding{warn(c.warns, diag.Warning, "10.0.0.1:80")}})
		settle(r)
		r.Close()
		if ft.n() != c.want {
			t.Errorf("%s (Traceable %t) warned: %d traces, want %d", c.rule.ID, c.rule.Traceable, ft.n(), c.want)
		}
	}
}

// The rules that declare themselves Traceable are the four about how a
// connection's transfers move.
func TestTraceableRules(t *testing.T) {
	var got []string
	for _, r := range rules.All() {
		if r.Traceable {
			got = append(got, r.ID)
		}
	}
	want := []string{"connection-bottleneck", "rwnd-limited", "slow-reader", "sndbuf-limited"}
	if !slices.Equal(got, want) {
		t.Errorf("Traceable rules %v, want %v", got, want)
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package exporter turns snapshots and the findings of the rules into
// Prometheus metrics, and serves them. serve's loop (internal/serve)
// collects every interval, diagnoses, and hands each collection to
// Publish, which prepares every sample; a scrape only copies the latest
// prepared samples, so it costs the same at 100 or 100,000 sockets and
// never starts a socket dump. No label names a single
// connection: every per-object family is cut to the top N.
package exporter

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// DefaultTop is the default number of listeners and destinations exported
// per namespace.
const DefaultTop = 20

// Options configure an Exporter.
type Options struct {
	// Top bounds the listener and destination series per namespace.
	Top int
	// Clock times the diagnosis; time.Now when nil.
	Clock func() time.Time
}

// Exporter is a prometheus.Collector serving the latest prepared view.
type Exporter struct {
	opts Options
	d    *descs

	// mu serialises Publish.
	mu          sync.Mutex
	collections int64
	// events adds up each namespace's eBPF counts (forgotten with it).
	events map[string]*eventTotals

	view atomic.Pointer[view]
}

// New returns an Exporter with nothing collected yet.
func New(opts Options) *Exporter {
	if opts.Top <= 0 {
		opts.Top = DefaultTop
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	x := &Exporter{opts: opts, d: newDescs(), events: map[string]*eventTotals{}}
	x.view.Store(&view{})
	return x
}

// sample is one prepared metric value.
type sample struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	value  float64
	labels []string
}

// view is everything one scrape emits.
type view struct {
	samples []sample
}

// viewBuilder collects samples, keeping the first of any duplicate label
// set so a scrape can never fail on a collision.
type viewBuilder struct {
	v    view
	seen map[string]bool
}

// add adds one sample. It is the one place every label value of the view
// is made safe (labelValue): names from workloads (process names, pods,
// containers) and from their configuration (a haproxy frontend's) can
// neither drop a series as invalid UTF-8 nor reach a scrape unbounded.
func (b *viewBuilder) add(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	copied := false
	for i, l := range labels {
		if safe := labelValue(l); safe != l {
			if !copied {
				labels, copied = slices.Clone(labels), true
			}
			labels[i] = safe
		}
	}
	key := d.String() + "\xff" + strings.Join(labels, "\xff")
	if b.seen[key] {
		return
	}
	b.seen[key] = true
	b.v.samples = append(b.v.samples, sample{desc: d, typ: t, value: v, labels: labels})
}

// Describe sends every family the exporter can emit.
func (x *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range x.d.all() {
		ch <- d
	}
}

// Collect emits the latest view. It does no collection of its own.
func (x *Exporter) Collect(ch chan<- prometheus.Metric) {
	for _, s := range x.view.Load().samples {
		m, err := prometheus.NewConstMetric(s.desc, s.typ, s.value, s.labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(s.desc, err)
		}
		ch <- m
	}
}

// Publish makes the view of one collection (one snapshot per namespace,
// taken at about the same time) and its diagnosis: ins are the windows
// the collection ended (report.Windows.Next) and rep their report, nil
// when there was none. collectTook is what the collection cost; started
// is when its diagnosis began (the view's diagnosis time runs from it to
// the view's end). Namespaces absent from snaps are forgotten.
func (x *Exporter) Publish(snaps []*snapshot.Snapshot, ins []*diag.Input, rep *report.Report, collectTook time.Duration, started time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.collections++
	b := &viewBuilder{seen: map[string]bool{}}
	d := x.d
	windows := make(map[*snapshot.Snapshot]*diag.Input, len(ins))
	for _, in := range ins {
		windows[in.Cur] = in
	}
	next := make(map[string]*snapshot.Snapshot, len(snaps))
	nsl := make(map[string]nsLabels, len(snaps))
	var newest time.Time
	for _, cur := range snaps {
		ns := cur.Netns.Name
		if _, dup := next[ns]; dup {
			continue
		}
		next[ns] = cur
		nl := labelsOf(ns, cur.Netns.Workload)
		nsl[ns] = nl
		if cur.Taken.After(newest) {
			newest = cur.Taken
		}
		x.addSnapshot(b, cur)
		if cur.Events != nil {
			t := x.events[ns]
			if t == nil {
				t = newEventTotals()
				x.events[ns] = t
			}
			t.add(cur.Events, x.opts.Top)
			t.expire(listening(cur))
			x.addEvents(b, nl, cur.Events, t)
		}
		in := windows[cur]
		if in == nil {
			continue // no window yet (window.Chain.Input says why)
		}
		b.add(d.window, prometheus.GaugeValue, in.Window().Seconds(), nl[:]...)
		x.addLimiters(b, in, nl)
	}
	if rep != nil {
		for i := range rep.Findings {
			b.add(d.finding, prometheus.GaugeValue, 1, findingLabels(&rep.Findings[i])...)
		}
		for _, u := range rep.Unknown {
			nl, ok := nsl[u.Netns]
			if !ok {
				nl = nsLabels{u.Netns}
			}
			b.add(d.unknown, prometheus.GaugeValue, 1, nl.with(u.Rule)...)
		}
	}
	for ns := range x.events {
		if next[ns] == nil {
			delete(x.events, ns)
		}
	}
	b.add(d.collectDur, prometheus.GaugeValue, collectTook.Seconds())
	b.add(d.collections, prometheus.CounterValue, float64(x.collections))
	if !newest.IsZero() {
		b.add(d.lastCollect, prometheus.GaugeValue, float64(newest.UnixNano())/1e9)
	}
	b.add(d.diagDur, prometheus.GaugeValue, x.opts.Clock().Sub(started).Seconds())
	x.view.Store(&b.v)
}

// addSnapshot adds what one snapshot shows on its own.
func (x *Exporter) addSnapshot(b *viewBuilder, s *snapshot.Snapshot) {
	d := x.d
	ns := labelsOf(s.Netns.Name, s.Netns.Workload)
	for _, c := range netstatCounters() {
		if v, ok := s.Counters[c.key]; ok && v >= 0 {
			b.add(d.counters[c.key], prometheus.CounterValue, float64(v), ns[:]...)
		}
	}
	if v, ok := s.Sockstat["TCP.tw"]; ok {
		b.add(d.timeWait, prometheus.GaugeValue, float64(v), ns[:]...)
	}
	if _, failed := s.Failed(snapshot.SourceSockdiag); !failed || len(s.Sockets) > 0 {
		byState := map[snapshot.State]int{}
		for i := range s.Sockets {
			byState[s.Sockets[i].State]++
		}
		states := make([]snapshot.State, 0, len(byState))
		for st := range byState {
			states = append(states, st)
		}
		sort.Slice(states, func(i, j int) bool { return states[i] < states[j] })
		for _, st := range states {
			b.add(d.sockets, prometheus.GaugeValue, float64(byState[st]), ns.with(st.String())...)
		}
		b.add(d.sockSeen, prometheus.GaugeValue, float64(len(s.Sockets)), ns[:]...)
		x.addListeners(b, s)
		x.addListenerConns(b, s, ns)
		x.addPorts(b, s, ns)
	}
	x.addSources(b, s, ns)
}

// addSources exports each source's outcome: up is 0 when it recorded an
// error (also a partial one), duration where it was timed.
func (x *Exporter) addSources(b *viewBuilder, s *snapshot.Snapshot, ns nsLabels) {
	failed := map[string]bool{}
	for _, e := range s.Errors {
		failed[e.Source] = true
	}
	done := map[string]bool{}
	for _, st := range s.Sources {
		up := 0.0
		if st.OK && !failed[st.Source] {
			up = 1
		}
		b.add(x.d.sourceUp, prometheus.GaugeValue, up, ns.with(st.Source)...)
		b.add(x.d.sourceDur, prometheus.GaugeValue, st.Duration.Seconds(), ns.with(st.Source)...)
		done[st.Source] = true
	}
	for _, e := range s.Errors {
		if !done[e.Source] {
			b.add(x.d.sourceUp, prometheus.GaugeValue, 0, ns.with(e.Source)...)
			done[e.Source] = true
		}
	}
}

// command names a socket's owner, "" when unknown.
func command(s *snapshot.Snapshot, sk *snapshot.Socket) string {
	if _, p := s.Owner(sk); p != nil {
		return p.Command
	}
	return ""
}

// addListeners exports the accept queue of the top N listeners by fill
// (Recv-Q over the backlog in Send-Q). Listeners sharing a local address
// and command (SO_REUSEPORT) show the fullest of them.
func (x *Exporter) addListeners(b *viewBuilder, s *snapshot.Snapshot) {
	type lis struct {
		local, port, cmd string
		q, max           uint32
		w                *snapshot.Workload
	}
	var ls []lis
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Listen {
			continue
		}
		ls = append(ls, lis{local: sk.Local.String(), port: strconv.Itoa(int(sk.Local.Port())), cmd: command(s, sk), q: sk.RecvQ, max: sk.SendQ, w: s.WorkloadOf(sk)})
	}
	fill := func(l lis) float64 { return tcpmodel.Fill{Queue: l.q, Backlog: l.max}.Frac() }
	sort.SliceStable(ls, func(i, j int) bool {
		if fi, fj := fill(ls[i]), fill(ls[j]); fi != fj {
			return fi > fj
		}
		return ls[i].local < ls[j].local
	})
	n := 0
	for _, l := range ls {
		if n == x.opts.Top {
			break
		}
		key := x.d.queueLen.String() + "\xff" + strings.Join([]string{s.Netns.Name, l.local, l.port, l.cmd}, "\xff")
		if b.seen[key] {
			continue
		}
		// Labelled by the listener's process's workload, else the
		// namespace's; the key above leaves it out, so the bound holds.
		nl := labelsOf(s.Netns.Name, l.w)
		b.add(x.d.queueLen, prometheus.GaugeValue, float64(l.q), nl.with(l.local, l.port, l.cmd)...)
		b.add(x.d.queueMax, prometheus.GaugeValue, float64(l.max), nl.with(l.local, l.port, l.cmd)...)
		n++
	}
}

// limiterOf names what held a connection back over the window: "app"
// when it was busy sending less than half of it (the application gave it
// nothing to send), else the largest of the kernel's chronographs.
func limiterOf(sh snapshot.Shares) string {
	if snapshot.Frac(sh.Busy, sh.Window) < 0.5 {
		return "app"
	}
	switch {
	case sh.Rwnd >= sh.Sndbuf && sh.Rwnd >= sh.Cwnd:
		return "rwnd"
	case sh.Sndbuf >= sh.Cwnd:
		return "sndbuf"
	}
	return "cwnd"
}

// addLimiters counts established connections seen in both samples by
// their dominant limiter (snapshot.ChronoShares).
func (x *Exporter) addLimiters(b *viewBuilder, in *diag.Input, ns nsLabels) {
	for _, s := range []*snapshot.Snapshot{in.Prev, in.Cur} {
		if _, failed := s.Failed(snapshot.SourceSockdiag); failed {
			return // no sockets seen is not "nothing limited"
		}
	}
	counts := map[string]int{"app": 0, "cwnd": 0, "rwnd": 0, "sndbuf": 0}
	candidates, known := 0, 0
	w := in.Window()
	var tb, pb snapshot.TCPInfo
	for i := range in.Cur.Sockets {
		sk := &in.Cur.Sockets[i]
		if sk.State != snapshot.Established || !sk.HasTCP() {
			continue
		}
		p := in.PrevOf(sk)
		if p == nil || !p.HasTCP() {
			continue
		}
		candidates++
		sh, ok := snapshot.ChronoShares(p.TCP(&pb), sk.TCP(&tb), w)
		if !ok {
			continue
		}
		known++
		counts[limiterOf(sh)]++
	}
	if candidates > 0 && known == 0 {
		return // no chronographs (kernel before 4.10): unknown, not zero
	}
	for _, l := range []string{"app", "cwnd", "rwnd", "sndbuf"} {
		b.add(x.d.limiter, prometheus.GaugeValue, float64(counts[l]), ns.with(l)...)
	}
}

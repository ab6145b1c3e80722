// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// otherLabel collects what falls outside a bounded label's first Top
// values.
const otherLabel = "other"

// eventTotals adds up one namespace's eBPF event counts (each snapshot
// holds the counts since the previous one) into Prometheus counters.
// Labels stay bounded: reasons come from the kernel's enums (a few dozen);
// destinations and listeners keep at most Top values and count the rest
// under "other". A listener's series ends when the listener is gone, a
// destination's once it has not moved for idleCollections collections
// (its count starts again from 0 if it comes back), so no label outlives
// what it names for long.
type eventTotals struct {
	gen             int
	drops, overflow map[string]float64
	resets          map[[2]string]float64 // direction, reason
	retrans         float64
	synRetrans      map[string]float64               // destination
	failed          map[string]map[[2]string]float64 // errno -> (errno, destination), each bounded
	connects        float64
	moved           map[any]int // bounded label -> collection it last moved in
}

// idleCollections is how long a destination series stays exported
// without moving.
const idleCollections = 2

func newEventTotals() *eventTotals {
	return &eventTotals{drops: map[string]float64{}, overflow: map[string]float64{}, resets: map[[2]string]float64{},
		synRetrans: map[string]float64{}, failed: map[string]map[[2]string]float64{}, moved: map[any]int{}}
}

// expire forgets destinations idle too long and listeners not in live.
func (t *eventTotals) expire(live map[string]bool) {
	for k := range t.overflow {
		if k != otherLabel && !live[k] {
			delete(t.overflow, k)
		}
	}
	forgetIdle(t.synRetrans, t.moved, t.gen)
	for _, m := range t.failed {
		forgetIdle(m, t.moved, t.gen)
	}
}

// forgetIdle deletes the series of m that have not moved for more than
// idleCollections collections, here and in moved.
func forgetIdle[K comparable](m map[K]float64, moved map[any]int, gen int) {
	for k := range m {
		if gen-moved[k] > idleCollections {
			delete(m, k)
			delete(moved, k)
		}
	}
}

// bounded returns key if it is already counted or there is room for it,
// else otherLabel.
func bounded[K comparable](m map[K]float64, key K, other K, top int) K {
	if _, ok := m[key]; ok {
		return key
	}
	n := len(m)
	if _, ok := m[other]; ok {
		n--
	}
	if n < top {
		return key
	}
	return other
}

func (t *eventTotals) add(ev *snapshot.Events, top int) {
	t.gen++
	if ev.Has(snapshot.ProgDrops) {
		for _, d := range ev.Drops {
			t.drops[d.Reason] += float64(d.Count)
			if d.Listener.IsValid() {
				t.overflow[bounded(t.overflow, d.Listener.String(), otherLabel, top)] += float64(d.Count)
			}
		}
	}
	for _, r := range ev.Resets {
		dir, reason := "received", r.Reason
		if r.Sent {
			dir = "sent"
		}
		t.resets[[2]string{dir, reason}] += float64(r.Count)
	}
	for _, r := range ev.Retransmits {
		if r.SYN {
			k := bounded(t.synRetrans, r.Remote.String(), otherLabel, top)
			t.synRetrans[k] += float64(r.Count)
			t.moved[k] = t.gen
		} else {
			t.retrans += float64(r.Count)
		}
	}
	for _, f := range ev.Flows {
		t.connects += float64(f.Opens)
		dst := f.Remote.String()
		for _, c := range f.Failures() {
			t.addFailed(c.Errno, dst, c.N, top)
		}
	}
}

// addFailed counts n failed connects to dst under errno; each errno keeps
// its own Top destinations, so health checks refused by many closed ports
// never push the destinations that ran out of ports into "other".
func (t *eventTotals) addFailed(errno, dst string, n uint64, top int) {
	if n == 0 {
		return
	}
	m := t.failed[errno]
	if m == nil {
		m = map[[2]string]float64{}
		t.failed[errno] = m
	}
	k := bounded(m, [2]string{errno, dst}, [2]string{errno, otherLabel}, top)
	m[k] += float64(n)
	t.moved[k] = t.gen
}

// addEvents exports one namespace's totals, each family only where the
// program that counts it ran (absent, not zero, otherwise). They carry the
// namespace's workload, not a process's: a counter's labels stay the same
// for its whole life, so rate() over it holds.
func (x *Exporter) addEvents(b *viewBuilder, ns nsLabels, ev *snapshot.Events, t *eventTotals) {
	d := x.d
	c := prometheus.CounterValue
	if ev.Has(snapshot.ProgDrops) {
		for reason, v := range t.drops {
			b.add(d.evDrops, c, v, ns.with(reason)...)
		}
		for l, v := range t.overflow {
			b.add(d.evOverflow, c, v, ns.with(l)...)
		}
	}
	for k, v := range t.resets {
		b.add(d.evResets, c, v, ns.with(k[0], k[1])...)
	}
	if ev.Has(snapshot.ProgRetransmits) {
		b.add(d.evRetrans, c, t.retrans, ns[:]...)
		for dst, v := range t.synRetrans {
			b.add(d.evSynRetrans, c, v, ns.with(dst)...)
		}
	}
	if ev.Has(snapshot.ProgLifecycle) {
		b.add(d.evConnects, c, t.connects, ns[:]...)
		for _, m := range t.failed {
			for k, v := range m {
				b.add(d.evFailed, c, v, ns.with(k[0], k[1])...)
			}
		}
	}
}

// listening is the local addresses of s's listeners, as
// EventDrop.Listener prints them.
func listening(s *snapshot.Snapshot) map[string]bool {
	m := map[string]bool{}
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Listen {
			m[s.Sockets[i].Local.String()] = true
		}
	}
	return m
}

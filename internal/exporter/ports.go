// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// addPorts exports the usable ephemeral range and, for the top N
// destinations, the ports held towards each, from the same model the
// port-exhaustion rule judges (tcpmodel): open sockets plus TIME_WAIT
// ones connect() cannot take over yet.
func (x *Exporter) addPorts(b *viewBuilder, s *snapshot.Snapshot, ns nsLabels) {
	p, err := tcpmodel.NewPortSpace(s)
	if err != nil {
		return
	}
	b.add(x.d.portsUsable, prometheus.GaugeValue, float64(p.Usable()), ns[:]...)
	use := p.DestUsage(s, nil, 0)
	dests := make([]tcpmodel.Dest, 0, len(use))
	for k := range use {
		dests = append(dests, k)
	}
	sort.Slice(dests, func(i, j int) bool {
		a, c := dests[i], dests[j]
		if ha, hc := use[a].Held(), use[c].Held(); ha != hc {
			return ha > hc
		}
		if a.Dst != c.Dst {
			return a.Dst.Compare(c.Dst) < 0
		}
		return a.Src.Compare(c.Src) < 0
	})
	if len(dests) > x.opts.Top {
		dests = dests[:x.opts.Top]
	}
	for _, k := range dests {
		b.add(x.d.portsInUse, prometheus.GaugeValue, float64(use[k].Held()), ns.with(k.Src.String(), k.Dst.String())...)
	}
}

// addListenerConns exports, for the top N listeners by count, the
// accepted connections processes hold (tcpmodel.AcceptedOwned), and each
// server's own limit read from its configuration beside what counts
// against it (tcpmodel.CapUseOf, as app-connection-cap judges it).
//
// A listener is labelled with its owner's workload, a server's limit with
// its own process's, else the namespace's (ns).
func (x *Exporter) addListenerConns(b *viewBuilder, s *snapshot.Snapshot, ns nsLabels) {
	ls := tcpmodel.ListenersOf(s)
	held := tcpmodel.AcceptedOwned(s, ls)
	type lis struct {
		sk *snapshot.Socket
		n  int
	}
	var all []lis
	for _, group := range ls.Groups() {
		for _, ln := range group {
			all = append(all, lis{ln, held[ln.Cookie]})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].sk.Local.Compare(all[j].sk.Local) < 0
	})
	for i, l := range all {
		if i == x.opts.Top {
			break
		}
		own := labelsOf(s.Netns.Name, s.WorkloadOf(l.sk))
		b.add(x.d.listenerConns, prometheus.GaugeValue, float64(l.n), own.with(l.sk.Local.String(), strconv.Itoa(int(l.sk.Local.Port())), command(s, l.sk))...)
	}
	for i := range s.AppCaps {
		if i == x.opts.Top {
			break
		}
		c := &s.AppCaps[i]
		u := tcpmodel.CapUseOf(s, c)
		pid := strconv.Itoa(c.Pid)
		own := ns
		if p := s.Procs[c.Pid]; p != nil && p.Workload != nil {
			own = labelsOf(s.Netns.Name, p.Workload)
		}
		b.add(x.d.appLimit, prometheus.GaugeValue, float64(tcpmodel.CapLimit(c)), own.with(c.Command, pid, c.Setting)...)
		b.add(x.d.appHeld, prometheus.GaugeValue, float64(u.Held[u.Top]), own.with(c.Command, pid, c.Setting)...)
	}
}

package exporter

import (
	"sort"

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

package exporter

import (
	"net/netip"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// portDest is one 4-tuple space: connect() can reuse a local port for
// another destination, so the range limits each (source, destination)
// pair alone, as the port-exhaustion rule counts it.
type portDest struct {
	src netip.Addr
	dst netip.AddrPort
}

// addPorts exports the usable ephemeral range (ip_local_port_range minus
// reserved ports inside it) and, for the top N destinations, how many
// sockets hold an ephemeral local port towards it (TIME_WAIT included).
func (x *Exporter) addPorts(b *viewBuilder, s *snapshot.Snapshot) {
	raw, ok := s.Sysctls["net.ipv4.ip_local_port_range"]
	if !ok {
		return
	}
	lo, hi, err := procnet.PortRange(raw)
	if err != nil {
		return
	}
	reserved, err := procnet.ReservedPorts(s.Sysctls["net.ipv4.ip_local_reserved_ports"])
	if err != nil {
		reserved = nil
	}
	usable := hi - lo + 1 - procnet.CountReservedIn(reserved, lo, hi)
	ns := s.Netns.Name
	b.add(x.d.portsUsable, prometheus.GaugeValue, float64(usable), ns)

	listen := map[uint16]bool{}
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Listen {
			listen[s.Sockets[i].Local.Port()] = true
		}
	}
	use := map[portDest]int{}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		p := int(sk.Local.Port())
		if sk.State == snapshot.Listen || sk.Remote.Port() == 0 || p < lo || p > hi || listen[uint16(p)] || inRanges(reserved, p) {
			continue
		}
		use[portDest{src: sk.Local.Addr(), dst: sk.Remote}]++
	}
	dests := make([]portDest, 0, len(use))
	for k := range use {
		dests = append(dests, k)
	}
	sort.Slice(dests, func(i, j int) bool {
		a, c := dests[i], dests[j]
		if use[a] != use[c] {
			return use[a] > use[c]
		}
		if a.dst != c.dst {
			return a.dst.Compare(c.dst) < 0
		}
		return a.src.Compare(c.src) < 0
	})
	if len(dests) > x.opts.Top {
		dests = dests[:x.opts.Top]
	}
	for _, k := range dests {
		b.add(x.d.portsInUse, prometheus.GaugeValue, float64(use[k]), ns, k.src.String(), k.dst.String())
	}
}

func inRanges(rs [][2]int, p int) bool {
	for _, r := range rs {
		if p >= r[0] && p <= r[1] {
			return true
		}
	}
	return false
}

// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

// Select is the connections a trace records, as the command line names
// them: ports at either end, local, remote, and peers (addresses or
// prefixes).
type Select struct {
	Ports, LPorts, RPorts []uint
	Peers                 []string
}

// Filter is s as the kernel runs it. An error names the option at fault
// ("--port 0: ...").
func (s *Select) Filter() (sockdiag.Filter, error) {
	var flt sockdiag.Filter
	for _, l := range []struct {
		name string
		in   []uint
		out  *[]uint16
	}{{"port", s.Ports, &flt.Ports}, {"lport", s.LPorts, &flt.LPorts}, {"rport", s.RPorts, &flt.RPorts}} {
		for _, p := range l.in {
			if p == 0 || p > 65535 {
				return flt, fmt.Errorf("--%s %d: ports are 1..65535", l.name, p)
			}
			*l.out = append(*l.out, uint16(p))
		}
	}
	for _, p := range s.Peers {
		pfx, err := parsePrefix(p)
		if err != nil {
			return flt, fmt.Errorf("--peer %q: %w", p, err)
		}
		flt.Peers = append(flt.Peers, pfx)
	}
	if _, err := flt.Bytecode(); err != nil {
		return flt, err
	}
	return flt, nil
}

// parsePrefix reads an address (a host prefix) or a prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

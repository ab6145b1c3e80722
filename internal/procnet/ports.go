// SPDX-License-Identifier: Apache-2.0

package procnet

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PortRange parses ip_local_port_range "32768\t60999" (or folded
// "32768 60999"): the first and last ephemeral port, inclusive.
func PortRange(v string) (lo, hi int, err error) {
	f := strings.Fields(v)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("procnet: ip_local_port_range %q: want two ports", v)
	}
	if lo, err = parsePort(f[0]); err == nil {
		hi, err = parsePort(f[1])
	}
	if err != nil {
		return 0, 0, fmt.Errorf("procnet: ip_local_port_range %q: %w", v, err)
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("procnet: ip_local_port_range %q: first port above last", v)
	}
	return lo, hi, nil
}

// ReservedPorts parses ip_local_reserved_ports "8000-8080,9000" into
// inclusive ranges, a single port p as [p,p]; "" means none (nil).
func ReservedPorts(v string) ([][2]int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var out [][2]int
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		a, b, isRange := strings.Cut(part, "-")
		lo, err := parsePort(a)
		hi := lo
		if err == nil && isRange {
			hi, err = parsePort(b)
		}
		if err == nil && lo > hi {
			err = fmt.Errorf("range %q runs backwards", part)
		}
		if err != nil {
			return nil, fmt.Errorf("procnet: ip_local_reserved_ports %q: %w", v, err)
		}
		out = append(out, [2]int{lo, hi})
	}
	return out, nil
}

// CountReservedIn counts the distinct ports of ranges that lie inside
// [lo,hi]; overlapping ranges count once, backwards ones not at all.
func CountReservedIn(ranges [][2]int, lo, hi int) int {
	if lo > hi {
		return 0
	}
	var clipped [][2]int
	for _, r := range ranges {
		a, b := max(r[0], lo), min(r[1], hi)
		if a <= b {
			clipped = append(clipped, [2]int{a, b})
		}
	}
	slices.SortFunc(clipped, func(x, y [2]int) int { return cmp.Compare(x[0], y[0]) })
	n := 0
	for i, r := range clipped {
		if i > 0 {
			// Skip what the previous ranges already counted.
			r[0] = max(r[0], clipped[i-1][1]+1)
			clipped[i][1] = max(r[1], clipped[i-1][1])
		}
		if r[0] <= r[1] {
			n += r[1] - r[0] + 1
		}
	}
	return n
}

// parsePort parses a decimal port number 0-65535.
func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import "slices"

// PathMinSamples is how many delivery-rate samples taken while the
// sender was held by nothing but the path (cwnd or pacing) a recording
// needs before their median is taken for the path's rate. One sample is
// one round trip's burst, which can read many times the link's rate.
const PathMinSamples = 5

// PathEstimate is the median of rates (bytes/s), each a delivery-rate
// sample taken while the sender was held only by the path; false with
// fewer than PathMinSamples. The median, not the best: a single burst
// (a sample over a few packets, or over a sub-RTT ACK train) reads many
// times the link, and a flow limited by its own window reads below it.
func PathEstimate(rates []float64) (float64, bool) {
	var rs []float64
	for _, r := range rates {
		if r > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) < PathMinSamples {
		return 0, false
	}
	slices.Sort(rs)
	n := len(rs)
	if n%2 == 1 {
		return rs[n/2], true
	}
	return (rs[n/2-1] + rs[n/2]) / 2, true
}

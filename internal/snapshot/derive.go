// SPDX-License-Identifier: Apache-2.0

package snapshot

import "time"

// Shares splits a window of a connection's life by what limited it, from
// the tcp_info chronographs of two samples. The kernel's busy_time is the
// sum of three chronographs: sending limited by nothing local (cwnd or
// pacing: "congestion" here), by the peer's receive window, and by the
// send buffer.
type Shares struct {
	Window time.Duration `json:"window_ns"`
	Busy   time.Duration `json:"busy_ns"`
	Rwnd   time.Duration `json:"rwnd_limited_ns"`
	Sndbuf time.Duration `json:"sndbuf_limited_ns"`
	Cwnd   time.Duration `json:"cwnd_limited_ns"`
}

// ChronoShares derives Shares; ok is false when either sample lacks the
// chronographs (kernel before 4.10) or the counters went backwards (a
// different connection reusing the cookie is impossible, but be safe).
func ChronoShares(prev, cur *TCPInfo, window time.Duration) (Shares, bool) {
	if !prev.Has(EndChrono) || !cur.Has(EndChrono) || window <= 0 {
		return Shares{}, false
	}
	if cur.BusyTime < prev.BusyTime || cur.RwndLimited < prev.RwndLimited || cur.SndbufLimited < prev.SndbufLimited {
		return Shares{}, false
	}
	us := func(v uint64) time.Duration { return time.Duration(v) * time.Microsecond }
	sh := Shares{
		Window: window,
		Busy:   us(cur.BusyTime - prev.BusyTime),
		Rwnd:   us(cur.RwndLimited - prev.RwndLimited),
		Sndbuf: us(cur.SndbufLimited - prev.SndbufLimited),
	}
	if c := sh.Busy - sh.Rwnd - sh.Sndbuf; c > 0 {
		sh.Cwnd = c
	}
	return sh, true
}

// Frac returns part/whole in [0,1], 0 when whole is 0.
func Frac(part, whole time.Duration) float64 {
	if whole <= 0 {
		return 0
	}
	f := float64(part) / float64(whole)
	if f > 1 {
		return 1
	}
	if f < 0 {
		return 0
	}
	return f
}

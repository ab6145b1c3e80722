// SPDX-License-Identifier: Apache-2.0

// Package units prints the quantities tcpdoctor reports the way network
// engineers read them: buffer sizes (16K, 3.4M), rates in bits per second,
// durations and round-trip times rounded for people, and shares.
package units

import (
	"fmt"
	"strings"
	"time"
)

// Bytes prints a byte count the way people size buffers: 16K, 4M, 3.4M.
func Bytes(b float64) string {
	switch {
	case b >= 1<<30:
		return trim(b/(1<<30)) + "G"
	case b >= 1<<20:
		return trim(b/(1<<20)) + "M"
	case b >= 1<<10:
		return trim(b/(1<<10)) + "K"
	}
	return fmt.Sprintf("%.0fB", b)
}

// Rate prints bytes per second as bits per second: 93.2 Mbit/s.
func Rate(bytesPerSec float64) string {
	bits := bytesPerSec * 8
	switch {
	case bits >= 1e9:
		return trim(bits/1e9) + " Gbit/s"
	case bits >= 1e6:
		return trim(bits/1e6) + " Mbit/s"
	case bits >= 1e3:
		return trim(bits/1e3) + " kbit/s"
	}
	return fmt.Sprintf("%.0f bit/s", bits)
}

// trim prints one decimal and drops a trailing ".0".
func trim(v float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
}

// Pct prints a fraction as a whole percentage.
func Pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// Dur prints a duration rounded for people: 450ms, 45s, 12m30s, 3h5m0s.
func Dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// RTT prints a round-trip time: 60µs, 2.5ms, 20ms.
func RTT(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return trim(float64(d)/float64(time.Millisecond)) + "ms"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

// Seconds converts seconds to a Duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// N prints a count with its noun, the noun plural (with s) unless one:
// "1 socket", "3 sockets", "0 sockets".
func N(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Share prints part of whole as both times and the percentage, e.g.
// "950ms of 1.032s (92%)". The times keep four significant digits of
// whole, so the percentage a reader works out from them is the one
// printed (units.Dur's rounding made "65% (1s of 2s)" and "92% (1s of
// 1s)"). Shares of time are printed through this one function.
func Share(part, whole time.Duration) string {
	unit := time.Duration(1)
	for unit*10000 <= whole {
		unit *= 10
	}
	pct := 0.0
	if whole > 0 {
		pct = float64(part) / float64(whole)
	}
	return fmt.Sprintf("%s of %s (%s)", part.Round(unit), whole.Round(unit), Pct(pct))
}

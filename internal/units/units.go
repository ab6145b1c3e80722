// SPDX-License-Identifier: Apache-2.0

// Package units prints the quantities tcpdoctor reports the way network
// engineers read them: buffer sizes (16K, 3.4M), rates in bits per second,
// durations and round-trip times rounded for people, and shares.
package units

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Bytes prints a byte count the way people size buffers: 16K, 4M, 3.4M,
// 512B. Every size on screen is printed in this style.
func Bytes(b float64) string { return string(AppendBytes(nil, b)) }

// AppendBytes appends what Bytes prints, allocating nothing more (a
// table cell).
func AppendBytes(b []byte, n float64) []byte {
	switch {
	case n >= 1<<30:
		return append(appendTrim(b, n, 1<<30), 'G')
	case n >= 1<<20:
		return append(appendTrim(b, n, 1<<20), 'M')
	case n >= 1<<10:
		return append(appendTrim(b, n, 1<<10), 'K')
	}
	return append(appendDiv(b, n, 1, 0), 'B')
}

// Rate prints bytes per second as bits per second: 93.2 Mbit/s. Every
// rate on screen is printed in this style.
func Rate(bytesPerSec float64) string { return string(appendRate(nil, bytesPerSec, " ")) }

// AppendRate appends what Rate prints without its space, so that a
// table's cell stays one field (columns are split at spaces): 93.2Mbit/s.
// It allocates nothing more.
func AppendRate(b []byte, bytesPerSec float64) []byte { return appendRate(b, bytesPerSec, "") }

func appendRate(b []byte, bytesPerSec float64, sep string) []byte {
	bits := bytesPerSec * 8
	unit := "bit/s"
	switch {
	case bits >= 1e9:
		b, unit = appendTrim(b, bits, 1e9), "Gbit/s"
	case bits >= 1e6:
		b, unit = appendTrim(b, bits, 1e6), "Mbit/s"
	case bits >= 1e3:
		b, unit = appendTrim(b, bits, 1e3), "kbit/s"
	default:
		b = appendDiv(b, bits, 1, 0)
	}
	return append(append(b, sep...), unit...)
}

// AppendMillis appends microseconds as milliseconds with one decimal, a
// table's RTT cell: 20.4ms.
func AppendMillis(b []byte, us uint32) []byte {
	return append(appendRatio(b, uint64(us), 1000, 1), "ms"...)
}

// appendTrim appends num/den with one decimal, a trailing ".0" dropped.
func appendTrim(b []byte, num, den float64) []byte {
	b = appendDiv(b, num, den, 1)
	if n := len(b); n >= 2 && b[n-2] == '.' && b[n-1] == '0' {
		b = b[:n-2]
	}
	return b
}

// appendDiv appends num/den with prec (0-2) decimals as
// strconv.AppendFloat does: in integers (appendRatio) when num is a
// whole number within their range, as a listing's counters are.
func appendDiv(b []byte, num, den float64, prec int) []byte {
	if num >= 0 && num < 1<<50 && num == math.Trunc(num) {
		return appendRatio(b, uint64(num), uint64(den), prec)
	}
	return strconv.AppendFloat(b, num/den, 'f', prec, 64)
}

// appendRatio appends num/den with prec (0-2) decimals exactly as
// strconv.AppendFloat(float64(num)/float64(den), 'f', prec, 64) does,
// without its float formatting (a listing formats a few per row): the
// quotient is rounded in integers, and a remainder within a hair of half
// way, where the float's own rounding decides, goes to strconv. num must
// stay below 2^53 / 100.
func appendRatio(b []byte, num, den uint64, prec int) []byte {
	scale := uint64(1)
	for range prec {
		scale *= 10
	}
	q, r := num*scale/den, num*scale%den
	// |2r - den| relative to den: floats err by 2^-52 of the value, so
	// anything nearer half way than 2^-30 is left to strconv.
	if d := int64(2*r) - int64(den); d < 0 && uint64(-d) <= den>>30 || d >= 0 && uint64(d) <= den>>30 {
		return strconv.AppendFloat(b, float64(num)/float64(den), 'f', prec, 64)
	}
	if 2*r > den {
		q++
	}
	b = strconv.AppendUint(b, q/scale, 10)
	if prec == 0 {
		return b
	}
	b = append(b, '.')
	frac := q % scale
	for s := scale / 10; s > 0; s /= 10 {
		b = append(b, byte('0'+frac/s%10))
	}
	return b
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
		return string(appendTrim(nil, float64(d), float64(time.Millisecond))) + "ms"
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

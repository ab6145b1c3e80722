// SPDX-License-Identifier: Apache-2.0

package output

import (
	"math"
	"net/netip"
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// AppendAddrPort appends what AddrPort.String gives, escaped when it has
// a zone (from a file, a zone can be anything).
func AppendAddrPort(b []byte, ap netip.AddrPort) []byte {
	if !ap.Addr().IsValid() || ap.Addr().Zone() != "" {
		return append(b, textsafe.String(ap.String())...)
	}
	return ap.AppendTo(b)
}

// AppendMS appends microseconds as milliseconds: 20.4ms.
func AppendMS(b []byte, us uint32) []byte {
	return append(appendRatio(b, uint64(us), 1000, 1), "ms"...)
}

// AppendBps appends bytes per second as bits per second in the style
// units.Rate prints, without its space (a table cell): 160.0Mbit/s.
func AppendBps(b []byte, bytesPerSec uint64) []byte {
	if bytesPerSec >= 1<<50 { // bits past float64's exact integers
		bits := float64(bytesPerSec) * 8
		return append(strconv.AppendFloat(b, bits/1e9, 'f', 2, 64), "Gbit/s"...)
	}
	bits := bytesPerSec * 8
	switch {
	case bits >= 1e9:
		return append(appendRatio(b, bits, 1e9, 2), "Gbit/s"...)
	case bits >= 1e6:
		return append(appendRatio(b, bits, 1e6, 1), "Mbit/s"...)
	case bits >= 1e3:
		return append(appendRatio(b, bits, 1e3, 0), "kbit/s"...)
	}
	return append(strconv.AppendUint(b, bits, 10), "bit/s"...)
}

// AppendSize appends a buffer size: 416K, 4M, 3.8M, 512.
func AppendSize(b []byte, v uint32) []byte {
	switch {
	case v >= 1<<20 && v%(1<<20) == 0:
		return append(strconv.AppendUint(b, uint64(v>>20), 10), 'M')
	case v >= 1<<20:
		return append(appendRatio(b, uint64(v), 1<<20, 1), 'M')
	case v >= 1<<10 && v%(1<<10) == 0:
		return append(strconv.AppendUint(b, uint64(v>>10), 10), 'K')
	case v >= 1<<10:
		return append(appendRatio(b, uint64(v), 1024, 1), 'K')
	}
	return strconv.AppendUint(b, uint64(v), 10)
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

// Bps is AppendBps as a string.
func Bps(bytesPerSec uint64) string { return string(AppendBps(nil, bytesPerSec)) }

// Size is AppendSize as a string.
func Size(v uint32) string { return string(AppendSize(nil, v)) }

// AppendJSONFloat formats f as encoding/json does (shortest repr, 'e'
// form outside [1e-6, 1e21)). NaN and infinities, which encoding/json
// refuses, are written as 0.
func AppendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

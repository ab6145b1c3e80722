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

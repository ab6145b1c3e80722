// SPDX-License-Identifier: Apache-2.0

package units

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The style in strconv's float formatting, as Rate and Bytes printed it
// with fmt: one decimal, a trailing ".0" dropped. The integer formatting
// must give the very same bytes.
func strconvTrim(v float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
}

func strconvMillis(us uint32) string {
	return strconv.FormatFloat(float64(us)/1000, 'f', 1, 64) + "ms"
}

func strconvRate(bytesPerSec uint64) string {
	bits := float64(bytesPerSec) * 8
	switch {
	case bits >= 1e9:
		return strconvTrim(bits/1e9) + "Gbit/s"
	case bits >= 1e6:
		return strconvTrim(bits/1e6) + "Mbit/s"
	case bits >= 1e3:
		return strconvTrim(bits/1e3) + "kbit/s"
	}
	return strconv.FormatFloat(bits, 'f', 0, 64) + "bit/s"
}

func strconvBytes(v uint64) string {
	n := float64(v)
	switch {
	case n >= 1<<30:
		return strconvTrim(n/(1<<30)) + "G"
	case n >= 1<<20:
		return strconvTrim(n/(1<<20)) + "M"
	case n >= 1<<10:
		return strconvTrim(n/(1<<10)) + "K"
	}
	return strconv.FormatFloat(n, 'f', 0, 64) + "B"
}

// checkCell fails t when a cell of v differs from strconv's, or Rate
// from the rate's cell with a space before its unit.
func checkCell(t *testing.T, v uint64) {
	t.Helper()
	if v <= math.MaxUint32 {
		if got, want := string(AppendMillis(nil, uint32(v))), strconvMillis(uint32(v)); got != want {
			t.Fatalf("AppendMillis(%d) = %q, strconv %q", v, got, want)
		}
	}
	if got, want := string(AppendBytes(nil, float64(v))), strconvBytes(v); got != want {
		t.Fatalf("AppendBytes(%d) = %q, strconv %q", v, got, want)
	}
	if got, want := string(AppendRate(nil, float64(v))), strconvRate(v); got != want {
		t.Fatalf("AppendRate(%d) = %q, strconv %q", v, got, want)
	}
	cell := strconvRate(v)
	i := strings.IndexFunc(cell, unicode.IsLetter)
	if got, want := Rate(float64(v)), cell[:i]+" "+cell[i:]; got != want {
		t.Fatalf("Rate(%d) = %q, want %q", v, got, want)
	}
}

// TestCellsAsStrconv: AppendMillis, AppendRate and AppendBytes give what
// strconv's float formatting gives, on every value up to 2^21 (half-way
// cases among them), around each unit's boundaries, and on random ones.
func TestCellsAsStrconv(t *testing.T) {
	for v := range uint64(1 << 21) {
		checkCell(t, v)
	}
	for _, edge := range []uint64{125, 125_000, 125_000_000, 1 << 30, 1 << 32, 1 << 40, 1<<47 - 1, 1 << 47, 1 << 50, math.MaxUint64} {
		for d := range uint64(2000) {
			checkCell(t, edge+d-1000)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2_000_000 {
		checkCell(t, r.Uint64()>>r.UintN(64))
	}
}

// FuzzCells: any value formats as strconv does.
func FuzzCells(f *testing.F) {
	for _, v := range []uint64{0, 40, 20450, 1<<20 + 512, 156_250_000, math.MaxUint64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) { checkCell(t, v) })
}

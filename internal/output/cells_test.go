// SPDX-License-Identifier: Apache-2.0

package output

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
)

func TestCells(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(AppendMS(nil, 20400)), "20.4ms"},
		{string(AppendMS(nil, 40)), "0.0ms"},
		{Bps(20e6), "160.0Mbit/s"},
		{Bps(125e6), "1.00Gbit/s"},
		{Bps(1000), "8kbit/s"},
		{Bps(0), "0bit/s"},
		{Size(4 << 20), "4M"},
		{Size(416 << 10), "416K"},
		{Size(3939840), "3.8M"},
		{Size(2500000), "2.4M"},
		{Size(1000000), "976.6K"},
		{Size(512), "512"},
		{string(AppendAddrPort(nil, netip.MustParseAddrPort("[2001:db8::1]:80"))), "[2001:db8::1]:80"},
		{string(AppendAddrPort(nil, netip.MustParseAddrPort("[fe80::1%a\nb]:80"))), `[fe80::1%a\nb]:80`},
		{string(AppendAddrPort(nil, netip.AddrPort{})), "invalid AddrPort"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// AppendJSONFloat writes what encoding/json writes, and 0 for what it
// refuses.
func TestAppendJSONFloat(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 0.5, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21, 1.5e300, -2.5e-10, math.SmallestNonzeroFloat64} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSONFloat(nil, f); string(got) != string(want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := AppendJSONFloat(nil, f); string(got) != "0" {
			t.Errorf("%v: got %s, want 0", f, got)
		}
	}
}

// strconvCells are the cells as they were formatted before appendRatio:
// every float through strconv. The integer formatting must give the very
// same bytes.
func strconvMS(us uint32) string {
	return strconv.FormatFloat(float64(us)/1000, 'f', 1, 64) + "ms"
}

func strconvBps(bytesPerSec uint64) string {
	bits := float64(bytesPerSec) * 8
	switch {
	case bits >= 1e9:
		return strconv.FormatFloat(bits/1e9, 'f', 2, 64) + "Gbit/s"
	case bits >= 1e6:
		return strconv.FormatFloat(bits/1e6, 'f', 1, 64) + "Mbit/s"
	case bits >= 1e3:
		return strconv.FormatFloat(bits/1e3, 'f', 0, 64) + "kbit/s"
	}
	return strconv.FormatFloat(bits, 'f', 0, 64) + "bit/s"
}

func strconvSize(v uint32) string {
	switch {
	case v >= 1<<20 && v%(1<<20) == 0:
		return strconv.FormatUint(uint64(v>>20), 10) + "M"
	case v >= 1<<20:
		return strconv.FormatFloat(float64(v)/(1<<20), 'f', 1, 64) + "M"
	case v >= 1<<10 && v%(1<<10) == 0:
		return strconv.FormatUint(uint64(v>>10), 10) + "K"
	case v >= 1<<10:
		return strconv.FormatFloat(float64(v)/1024, 'f', 1, 64) + "K"
	}
	return strconv.FormatUint(uint64(v), 10)
}

// TestCellsAsStrconv: AppendMS, AppendBps and AppendSize give what
// strconv's float formatting gives, on every value up to 2^21 (half-way
// cases among them), around each unit's boundaries, and on random ones.
func TestCellsAsStrconv(t *testing.T) {
	check := func(v uint64) {
		t.Helper()
		if v <= math.MaxUint32 {
			if got, want := string(AppendMS(nil, uint32(v))), strconvMS(uint32(v)); got != want {
				t.Fatalf("AppendMS(%d) = %q, strconv %q", v, got, want)
			}
			if got, want := string(AppendSize(nil, uint32(v))), strconvSize(uint32(v)); got != want {
				t.Fatalf("AppendSize(%d) = %q, strconv %q", v, got, want)
			}
		}
		if got, want := string(AppendBps(nil, v)), strconvBps(v); got != want {
			t.Fatalf("AppendBps(%d) = %q, strconv %q", v, got, want)
		}
	}
	for v := range uint64(1 << 21) {
		check(v)
	}
	for _, edge := range []uint64{125, 125_000, 125_000_000, 1 << 32, 1 << 40, 1<<50 - 1, 1 << 50, math.MaxUint64} {
		for d := range uint64(2000) {
			check(edge + d - 1000)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2_000_000 {
		check(r.Uint64() >> r.UintN(64))
	}
}

// FuzzCells: any value formats as strconv does.
func FuzzCells(f *testing.F) {
	for _, v := range []uint64{0, 40, 20450, 1<<20 + 512, 156_250_000, math.MaxUint64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) {
		if got, want := string(AppendBps(nil, v)), strconvBps(v); got != want {
			t.Fatalf("AppendBps(%d) = %q, strconv %q", v, got, want)
		}
		if got, want := string(AppendMS(nil, uint32(v))), strconvMS(uint32(v)); got != want {
			t.Fatalf("AppendMS(%d) = %q, strconv %q", uint32(v), got, want)
		}
		if got, want := string(AppendSize(nil, uint32(v))), strconvSize(uint32(v)); got != want {
			t.Fatalf("AppendSize(%d) = %q, strconv %q", uint32(v), got, want)
		}
	})
}

// SPDX-License-Identifier: Apache-2.0

package output

import (
	"encoding/json"
	"math"
	"net/netip"
	"testing"
)

func TestCells(t *testing.T) {
	for _, c := range []struct{ got, want string }{
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

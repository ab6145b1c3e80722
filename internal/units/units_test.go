// SPDX-License-Identifier: Apache-2.0

package units

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPrint(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(16 << 10), "16K"},
		{Bytes(3.4 * (1 << 20)), "3.4M"},
		{Bytes(512), "512B"},
		{Bytes(4 << 30), "4G"},
		{Rate(93.2e6 / 8), "93.2 Mbit/s"},
		{Rate(1.25e8), "1 Gbit/s"},
		{Rate(100), "800 bit/s"},
		{string(AppendRate(nil, 20e6)), "160Mbit/s"},
		{string(AppendRate(nil, 20.1e6)), "160.8Mbit/s"},
		{string(AppendRate(nil, 1000)), "8kbit/s"},
		{string(AppendRate(nil, 0)), "0bit/s"},
		{string(AppendBytes(nil, 3939840)), "3.8M"},
		{string(AppendBytes(nil, 1000000)), "976.6K"},
		{string(AppendMillis(nil, 20400)), "20.4ms"},
		{string(AppendMillis(nil, 40)), "0.0ms"},
		{Pct(0.934), "93%"},
		{Dur(1500 * time.Microsecond), "2ms"},
		{Dur(45*time.Second + 400*time.Millisecond), "45s"},
		{RTT(60 * time.Microsecond), "60µs"},
		{RTT(2500 * time.Microsecond), "2.5ms"},
		{RTT(20 * time.Millisecond), "20ms"},
		{N(1, "socket"), "1 socket"},
		{N(0, "socket"), "0 sockets"},
		{N(3, "network namespace"), "3 network namespaces"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// The printed times give the printed percentage: no "65% (1s of 2s)".
func TestShareAgrees(t *testing.T) {
	for _, c := range []struct {
		part, whole time.Duration
		want        string
	}{
		{1300 * time.Millisecond, 2 * time.Second, "1.3s of 2s (65%)"},
		{950 * time.Millisecond, 1032 * time.Millisecond, "950ms of 1.032s (92%)"},
		{3500 * time.Microsecond, 7 * time.Millisecond, "3.5ms of 7ms (50%)"},
		{1234567 * time.Microsecond, 98765432 * time.Microsecond, "1.23s of 1m38.77s (1%)"},
		{0, 0, "0s of 0s (0%)"},
	} {
		if got := Share(c.part, c.whole); got != c.want {
			t.Errorf("Share(%v, %v) = %q, want %q", c.part, c.whole, got, c.want)
		}
	}
	// Over a range of values, the share worked out from the printed
	// times is the printed percentage within one point.
	for whole := time.Millisecond; whole < time.Hour; whole = whole*7/3 + 13*time.Microsecond {
		for _, f := range []float64{0.004, 0.3149, 0.655, 0.9249, 0.995} {
			s := Share(time.Duration(float64(whole)*f), whole)
			fs := strings.Fields(s) // part "of" whole "(NN%)"
			pp, err1 := time.ParseDuration(fs[0])
			ww, err2 := time.ParseDuration(fs[2])
			pct, err3 := strconv.ParseFloat(strings.Trim(fs[3], "(%)"), 64)
			if err1 != nil || err2 != nil || err3 != nil || ww == 0 {
				t.Fatalf("%q does not parse", s)
			}
			if implied := 100 * float64(pp) / float64(ww); math.Abs(implied-pct) > 1 {
				t.Errorf("%s: the times say %.2f%%", s, implied)
			}
		}
	}
}

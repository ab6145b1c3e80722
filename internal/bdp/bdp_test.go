// SPDX-License-Identifier: Apache-2.0

package bdp

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		rate float64
		rtt  time.Duration
		want float64
	}{
		{100e6, 20 * time.Millisecond, 250_000}, // case C3
		{1e9, 20 * time.Millisecond, 2_500_000},
		{10e9, 100 * time.Microsecond, 125_000},
		{100e6, 0, 0},
		{0, time.Second, 0},
		{-5, time.Second, 0},
		{math.NaN(), time.Second, 0},
		{math.Inf(1), time.Second, 0},
		{1e9, -time.Millisecond, 0},
	} {
		if got := Bytes(c.rate, c.rtt); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("Bytes(%g, %v) = %g, want %g", c.rate, c.rtt, got, c.want)
		}
	}
}

func TestCeiling(t *testing.T) {
	// 16K per 20 ms round trip is 6.5536 Mbit/s (case C3's "about 800 KB/s").
	if got := Ceiling(16384, 20*time.Millisecond); math.Abs(got-6_553_600) > 1e-6 {
		t.Errorf("Ceiling = %g", got)
	}
	if Ceiling(16384, 0) != 0 || Ceiling(0, time.Second) != 0 {
		t.Error("degenerate ceiling not 0")
	}
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{
		{"100mbit", 100e6},
		{"1gbit", 1e9},
		{"1G", 1e9},
		{"500kbit", 500e3},
		{"12.5MB/s", 100e6},
		{"100Mbps", 100e6},
		{"100 Mbit/s", 100e6},
		{"1GBps", 8e9},
		{"1Mibit", 1 << 20},
		{"2KiB/s", 2 * 1024 * 8},
		{"64000bit", 64000},
		{" 10Gbit ", 10e9},
		{"1tbit", 1e12},
	} {
		got, err := ParseRate(c.in)
		if err != nil || math.Abs(got-c.want) > 1e-3 {
			t.Errorf("ParseRate(%q) = %g, %v; want %g", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "fast", "mbit", "0mbit", "-1mbit", "1.2.3mbit", "10 furlongs", "1e400", "5Xbit", ".", "100", "64000", " 100 "} {
		if v, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = %g, want error", bad, v)
		} else if !strings.HasPrefix(err.Error(), "bdp: ") {
			t.Errorf("ParseRate(%q) error %q lacks the bdp: prefix", bad, err)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100mbit", "1G", "12.5MB/s", "100Mbps", "", "1Ki", "9999999999999999999Tbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err == nil && (!(v > 0) || math.IsInf(v, 0)) {
			t.Fatalf("ParseRate(%q) = %g with no error", s, v)
		}
	})
}

func TestRoundUp(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{
		{250_000, 262144},
		{500_000, 524288},
		{2_500_000, 3 << 20},
		{5_000_000, 5 << 20},
		{1 << 20, 1 << 20},
		{1<<20 + 1, 2 << 20},
		{1, 1},
		{0, 0},
		{-3, 0},
		{math.NaN(), 0},
	} {
		if got := RoundUp(c.in); got != c.want {
			t.Errorf("RoundUp(%g) = %d, want %d", c.in, got, c.want)
		}
	}
}

func snap(sysctls map[string]string) *snapshot.Snapshot {
	return &snapshot.Snapshot{Sysctls: sysctls}
}

func byName(p Plan) map[string]Check {
	m := map[string]Check{}
	for _, c := range p.Checks {
		m[c.Setting] = c
	}
	return m
}

func TestForC3(t *testing.T) {
	// Case C3: 20 ms x 100 Mbit/s on a host with default limits.
	p := For(20*time.Millisecond, 100e6, snap(map[string]string{
		"net.core.wmem_max":            "212992",
		"net.core.rmem_max":            "212992",
		"net.ipv4.tcp_wmem":            "4096 16384 4194304",
		"net.ipv4.tcp_rmem":            "4096 131072 6291456",
		"net.ipv4.tcp_moderate_rcvbuf": "1",
		"net.ipv4.tcp_window_scaling":  "1",
		"net.ipv4.tcp_mem":             "22416 29888 44832",
	}))
	if p.BDP != 250_000 || p.SndBuf != 262144 || p.RcvBuf != 524288 || p.AskSndBuf != 262144 || p.AskRcvBuf != 262144 {
		t.Fatalf("plan = %+v", p)
	}
	c := byName(p)
	if w := c["net.core.wmem_max"]; w.OK || w.Needed != 262144 || w.Command != "sysctl -w net.core.wmem_max=262144" {
		t.Errorf("wmem_max check = %+v", w)
	}
	if r := c["net.core.rmem_max"]; r.OK || r.Command != "sysctl -w net.core.rmem_max=262144" {
		t.Errorf("rmem_max check = %+v", r)
	}
	for _, name := range []string{"net.ipv4.tcp_wmem[2]", "net.ipv4.tcp_rmem[2]", "net.ipv4.tcp_moderate_rcvbuf", "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_mem[1]"} {
		if !c[name].OK || c[name].Command != "" {
			t.Errorf("%s check = %+v, want OK", name, c[name])
		}
	}
}

func TestForGigabit(t *testing.T) {
	// 1 Gbit/s x 20 ms = 2.5 MB: 4 MiB tcp_wmem max suffices (measured 941
	// Mbit/s autotuned), the 6 MiB tcp_rmem max does too, and autotuning off
	// is flagged.
	p := For(20*time.Millisecond, 1e9, snap(map[string]string{
		"net.ipv4.tcp_wmem":            "4096 16384 4194304",
		"net.ipv4.tcp_rmem":            "4096 131072 4194304",
		"net.ipv4.tcp_moderate_rcvbuf": "0",
	}))
	if p.BDP != 2_500_000 || p.SndBuf != 3<<20 || p.RcvBuf != 5<<20 {
		t.Fatalf("plan = %+v", p)
	}
	c := byName(p)
	if !c["net.ipv4.tcp_wmem[2]"].OK {
		t.Errorf("tcp_wmem: %+v", c["net.ipv4.tcp_wmem[2]"])
	}
	if r := c["net.ipv4.tcp_rmem[2]"]; r.OK || r.Command != "sysctl -w net.ipv4.tcp_rmem='4096 131072 5242880'" {
		t.Errorf("tcp_rmem: %+v", r)
	}
	if m := c["net.ipv4.tcp_moderate_rcvbuf"]; m.OK || m.Command != "sysctl -w net.ipv4.tcp_moderate_rcvbuf=1" {
		t.Errorf("moderate_rcvbuf: %+v", m)
	}
	// Absent settings are unknown, never OK.
	if w := c["net.core.wmem_max"]; w.OK || w.Current != "unknown" {
		t.Errorf("absent wmem_max: %+v", w)
	}
}

func TestForDegenerate(t *testing.T) {
	if p := For(0, 1e9, snap(nil)); p.BDP != 0 || len(p.Checks) != 0 {
		t.Errorf("zero rtt plan = %+v", p)
	}
	if p := For(time.Millisecond, 1e6, nil); p.BDP != 125 || len(p.Checks) != 0 || p.SndBuf != 128 {
		t.Errorf("nil snapshot plan = %+v", p)
	}
	// Small BDP: no window scaling check needed.
	p := For(time.Millisecond, 1e6, snap(map[string]string{"net.ipv4.tcp_wmem": "garbage"}))
	if c := byName(p); c["net.ipv4.tcp_window_scaling"].Setting != "" || c["net.ipv4.tcp_wmem[2]"].Current != "unknown" {
		t.Errorf("checks = %+v", p.Checks)
	}
}

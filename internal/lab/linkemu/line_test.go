// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	for _, c := range []struct {
		e    time.Duration
		want time.Duration // upper bound of its bucket
	}{
		{-time.Microsecond, 0},
		{0, 10 * time.Microsecond},
		{15 * time.Microsecond, 20 * time.Microsecond},
		{1999 * time.Microsecond, 2 * time.Millisecond},
		{2 * time.Millisecond, 4 * time.Millisecond},
		{5 * time.Millisecond, 8 * time.Millisecond},
		{time.Hour, histUpper(histBuckets - 1)},
	} {
		i := histIndex(c.e)
		if i < 0 || i >= histBuckets || histUpper(i) != c.want {
			t.Errorf("%v: bucket %d upper %v, want %v", c.e, i, histUpper(i), c.want)
		}
		if c.e >= 0 && c.e < time.Second && histUpper(i) <= c.e {
			t.Errorf("%v: upper bound %v not above it", c.e, histUpper(i))
		}
	}
	var c counters
	for i := range 98 {
		c.hist[histIndex(time.Duration(i%10)*time.Microsecond)].Add(1)
	}
	c.hist[histIndex(3*time.Millisecond)].Add(2)
	if q := c.quantile(0.5); q != 10*time.Microsecond {
		t.Errorf("p50 %v", q)
	}
	if q := c.quantile(0.99); q != 4*time.Millisecond {
		t.Errorf("p99 %v", q)
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{
		{RTT: -1}, {RTT: MaxRTT + 1}, {RateUp: -1}, {RateDown: 1e12}, {QueueBytes: -1},
		{Loss: 1}, {Loss: -0.1}, {CC: "vegas"}, {Spin: 2 * time.Millisecond},
	} {
		if err := p.validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Params{RTT: 20 * time.Millisecond, RateUp: 1e9, Loss: 0.01, CC: "cubic"}).validate(); err != nil {
		t.Error(err)
	}
	if _, err := Start(nil, Params{}); err == nil {
		t.Error("nil topology accepted")
	}
}

func TestTBF(t *testing.T) {
	burst, limit := TBF(1e9, 20*time.Millisecond, 0)
	if burst != 125000 || limit != 2500000 {
		t.Errorf("1gbit: burst %d limit %d", burst, limit)
	}
	burst, limit = TBF(1e6, time.Millisecond, 1000)
	if burst != 64<<10+1514 || limit != burst {
		t.Errorf("1mbit: burst %d limit %d", burst, limit)
	}
	if a := tbfArgs(100e6, 20*time.Millisecond, 0); len(a) != 7 || a[2] != "100000000bit" {
		t.Errorf("args %v", a)
	}
	if tbfArgs(0, 0, 0) != nil {
		t.Error("rate 0 gave a qdisc")
	}
}

func TestParseStall(t *testing.T) {
	d, err := parseStall("some avg10=1.00 avg60=2.00 avg300=3.00 total=1500\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n")
	if err != nil || d != 1500*time.Microsecond {
		t.Fatalf("%v %v", d, err)
	}
	for _, bad := range []string{"", "full total=3", "some total=x"} {
		if _, err := parseStall(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParsePingOutput(t *testing.T) {
	sent, s, err := parsePingOutput("sent 3\n150000\n-2000\n")
	if err != nil || sent != 3 || len(s) != 2 || s[0] != 150*time.Microsecond || s[1] != -2*time.Microsecond {
		t.Fatalf("%d %v %v", sent, s, err)
	}
	for _, bad := range []string{"", "3\n1", "sent x", "sent 2\nabc"} {
		if _, _, err := parsePingOutput(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseSteal(t *testing.T) {
	steal, total, err := parseSteal("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil || steal != 35 || total != 1000 {
		t.Fatalf("steal %d total %d %v", steal, total, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x"} {
		if _, _, err := parseSteal(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestChildSpecs(t *testing.T) {
	ln := newLine(10*time.Millisecond, 50*time.Microsecond, 0.01, 7)
	ln.rtPrio = 10
	got, err := parseLineSpec(lineSpec(ln))
	if err != nil || got.delay != ln.delay || got.spin != ln.spin || got.loss != ln.loss || got.seed != 7 || got.rtPrio != 10 {
		t.Fatalf("round trip %q: %+v %v", lineSpec(ln), got, err)
	}
	for _, bad := range []string{"", "1,2,3", "x,0,0,0,0", "-1,0,0,0,0", "10,0,1,0,0", "10,-5,0,0,0", "10,0,0,0,100", "99999999999999,0,0,0,0"} {
		if _, err := parseLineSpec(bad); err == nil {
			t.Errorf("line spec %q accepted", bad)
		}
	}
	if iv, du, rtt, err := parsePingSpec("2000000,3000000000,20000000"); err != nil || iv != 2*time.Millisecond || du != 3*time.Second || rtt != 20*time.Millisecond {
		t.Errorf("ping spec: %v %v %v %v", iv, du, rtt, err)
	}
	for _, bad := range []string{"", "1,2", "0,1,1", "2000000,-1,0", "2000000,1,-1", "2000000,999999999999,0"} {
		if _, _, _, err := parsePingSpec(bad); err == nil {
			t.Errorf("ping spec %q accepted", bad)
		}
	}
}

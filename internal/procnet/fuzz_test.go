// SPDX-License-Identifier: Apache-2.0

package procnet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addFileSeeds adds every fixture file with the given base name.
func addFileSeeds(f *testing.F, names ...string) {
	for _, dir := range fixtures {
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join("testdata", dir, "net", n))
			if err == nil {
				f.Add(string(b))
			}
		}
	}
}

func FuzzParseNetstat(f *testing.F) {
	addFileSeeds(f, "netstat", "snmp")
	f.Add("Tcp: MaxConn\nTcp: -1\n")
	f.Add("A: x\nA: 18446744073709551615\n")
	f.Fuzz(func(t *testing.T, in string) {
		got := map[string]int64{}
		err := ParseNetstat(strings.NewReader(in), got)
		if err != nil && !strings.HasPrefix(err.Error(), "procnet: netstat") {
			t.Fatalf("error without prefix: %v", err)
		}
		for k := range got {
			grp, name, ok := strings.Cut(k, ".")
			if !ok || grp == "" || name == "" || !strings.Contains(in, grp+":") || !strings.Contains(in, name) {
				t.Fatalf("key %q not from the input", k)
			}
		}
		if err == nil {
			// Writing the result back out and parsing it again gives the same.
			again := map[string]int64{}
			if err := ParseNetstat(strings.NewReader(render(got)), again); err != nil {
				t.Fatalf("re-parse: %v", err)
			}
			if len(again) != len(got) {
				t.Fatalf("re-parse: %d keys, want %d", len(again), len(got))
			}
			for k, v := range got {
				if again[k] != v {
					t.Fatalf("re-parse: %s = %d, want %d", k, again[k], v)
				}
			}
		}
	})
}

// render writes counters back in netstat format, one pair per key.
func render(m map[string]int64) string {
	var b bytes.Buffer
	for k, v := range m {
		grp, name, _ := strings.Cut(k, ".")
		fmt.Fprintf(&b, "%s: %s\n%s: %d\n", grp, name, grp, v)
	}
	return b.String()
}

func FuzzParseSockstat(f *testing.F) {
	addFileSeeds(f, "sockstat", "sockstat6")
	f.Add("TCP: inuse 1 orphan\n")
	f.Fuzz(func(t *testing.T, in string) {
		got := map[string]int64{}
		err := ParseSockstat(strings.NewReader(in), got)
		if err != nil && !strings.HasPrefix(err.Error(), "procnet: sockstat") {
			t.Fatalf("error without prefix: %v", err)
		}
		for k := range got {
			grp, name, ok := strings.Cut(k, ".")
			if !ok || grp == "" || name == "" || !strings.Contains(in, grp+":") || !strings.Contains(in, name) {
				t.Fatalf("key %q not from the input", k)
			}
		}
	})
}

func FuzzPortRange(f *testing.F) {
	for _, dir := range []string{"linux-6.18", "linux-3.x-handmade"} {
		b, err := os.ReadFile(filepath.Join("testdata", dir, "sys", "net", "ipv4", "ip_local_port_range"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("1024 1024")
	f.Add("60999 32768")
	f.Fuzz(func(t *testing.T, in string) {
		lo, hi, err := PortRange(in)
		if err != nil {
			if lo != 0 || hi != 0 {
				t.Fatalf("error with values %d %d", lo, hi)
			}
			return
		}
		if lo < 0 || lo > hi || hi > 65535 {
			t.Fatalf("PortRange(%q) = %d, %d", in, lo, hi)
		}
		lo2, hi2, err := PortRange(fmt.Sprintf("%d\t%d\n", lo, hi))
		if err != nil || lo2 != lo || hi2 != hi {
			t.Fatalf("round trip: %d %d %v", lo2, hi2, err)
		}
	})
}

func FuzzReservedPorts(f *testing.F) {
	for _, dir := range []string{"linux-6.18", "linux-3.x-handmade"} {
		b, err := os.ReadFile(filepath.Join("testdata", dir, "sys", "net", "ipv4", "ip_local_reserved_ports"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), uint16(32768), uint16(60999))
	}
	f.Add("8000-8080,9000", uint16(8050), uint16(9100))
	f.Add("40000-40100,40050-40200,40000", uint16(39000), uint16(41000))
	f.Fuzz(func(t *testing.T, in string, lo, hi uint16) {
		ranges, err := ReservedPorts(in)
		if err != nil {
			return
		}
		parts := make([]string, len(ranges))
		for i, r := range ranges {
			if r[0] < 0 || r[0] > r[1] || r[1] > 65535 {
				t.Fatalf("ReservedPorts(%q) gave range %v", in, r)
			}
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
		again, err := ReservedPorts(strings.Join(parts, ","))
		if err != nil || len(again) != len(ranges) {
			t.Fatalf("round trip: %v %v", again, err)
		}
		// Keep the brute-force window small.
		l, h := int(lo), min(int(hi), int(lo)+4096)
		if got, want := CountReservedIn(ranges, l, h), bruteCount(ranges, l, h); got != want {
			t.Fatalf("CountReservedIn(%v, %d, %d) = %d, brute force %d", ranges, l, h, got, want)
		}
	})
}

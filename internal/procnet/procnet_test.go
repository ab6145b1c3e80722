// SPDX-License-Identifier: Apache-2.0

package procnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixtures are the directories under testdata with net/ and sys/.
var fixtures = []string{"linux-6.18", "linux-3.x-handmade", "broken"}

func fixtureFS(dir string) FS {
	return FS{NetDir: filepath.Join("testdata", dir, "net"), SysDir: filepath.Join("testdata", dir, "sys")}
}

// golden is what Fill put in a snapshot, minus timings.
type golden struct {
	Counters map[string]int64       `json:"counters"`
	Sockstat map[string]int64       `json:"sockstat"`
	Sysctls  map[string]string      `json:"sysctls"`
	Errors   []snapshot.SourceError `json:"errors"`
	Sources  map[string]bool        `json:"sources_ok"`
}

func fill(t testing.TB, p FS) *snapshot.Snapshot {
	t.Helper()
	s := &snapshot.Snapshot{}
	p.Fill(s)
	return s
}

func TestGolden(t *testing.T) {
	for _, dir := range fixtures {
		t.Run(dir, func(t *testing.T) {
			s := fill(t, fixtureFS(dir))
			g := golden{Counters: s.Counters, Sockstat: s.Sockstat, Sysctls: s.Sysctls, Errors: s.Errors, Sources: map[string]bool{}}
			for _, st := range s.Sources {
				g.Sources[st.Source] = st.OK
			}
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", dir, "golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Fill(%s) differs from %s (rerun with -update and review the diff):\n%s", dir, path, got)
			}
		})
	}
}

func TestFillSources(t *testing.T) {
	s := fill(t, fixtureFS("linux-6.18"))
	want := []string{snapshot.SourceNetstat, snapshot.SourceSNMP, snapshot.SourceSockstat, snapshot.SourceSysctl}
	if len(s.Sources) != len(want) {
		t.Fatalf("sources %+v, want %v", s.Sources, want)
	}
	for i, st := range s.Sources {
		if st.Source != want[i] || !st.OK || st.Duration <= 0 {
			t.Errorf("source %d = %+v, want %s ok with a duration", i, st, want[i])
		}
	}
	if len(s.Errors) != 0 {
		t.Errorf("errors on a clean fixture: %+v", s.Errors)
	}
}

func TestFillKeepsExistingMaps(t *testing.T) {
	s := &snapshot.Snapshot{Counters: map[string]int64{"X.y": 1}}
	fixtureFS("linux-6.18").Fill(s)
	if s.Counters["X.y"] != 1 || len(s.Counters) < 100 {
		t.Errorf("Fill replaced or did not fill an existing map: %d entries", len(s.Counters))
	}
}

func TestAbsentStaysAbsent(t *testing.T) {
	old := fill(t, fixtureFS("linux-3.x-handmade"))
	cur := fill(t, fixtureFS("linux-6.18"))
	if len(old.Errors) != 0 {
		t.Fatalf("old fixture errors: %+v", old.Errors)
	}
	for _, k := range []string{"TcpExt.TCPWantZeroWindowAdv", "TcpExt.TCPSynRetrans", "Tcp.InCsumErrors", "Ip.OutTransmits", "Udp.MemErrors"} {
		if v, ok := old.Counter(k); ok {
			t.Errorf("old kernel: %s = %d, want absent", k, v)
		}
		if _, ok := cur.Counter(k); !ok {
			t.Errorf("6.18: %s absent, want present", k)
		}
	}
	for _, k := range []string{"TCP6.inuse", "UDP6.inuse"} {
		if _, ok := old.Sockstat[k]; ok {
			t.Errorf("old kernel without sockstat6 has %s", k)
		}
		if _, ok := cur.Sockstat[k]; !ok {
			t.Errorf("6.18: %s absent", k)
		}
	}
	if _, ok := old.Sysctls["net.ipv4.tcp_notsent_lowat"]; ok {
		t.Error("old fixture: tcp_notsent_lowat present")
	}
	if v := old.Sysctls["net.ipv4.tcp_tw_recycle"]; v != "1" {
		t.Errorf("old fixture: tcp_tw_recycle = %q, want 1", v)
	}
	if v, ok := cur.Sysctls["net.ipv4.tcp_tw_recycle"]; ok {
		t.Errorf("6.18: tcp_tw_recycle = %q, want absent", v)
	}
	checks := []struct {
		name string
		want int64
	}{
		{"Tcp.MaxConn", -1},
		{"TcpExt.ListenOverflows", 15731},
		{"TcpExt.TCPHPHits", math.MaxInt64}, // 2^64-1 in the file
		{"IpExt.OutOctets", 1827364509},
	}
	for _, c := range checks {
		if v, ok := old.Counter(c.name); !ok || v != c.want {
			t.Errorf("%s = %d, %v; want %d", c.name, v, ok, c.want)
		}
	}
	if v := old.Sockstat["TCP.tw"]; v != 27944 {
		t.Errorf("TCP.tw = %d", v)
	}
	if v := old.Sysctls["fs.file-nr"]; v != "9376 0 1620218" {
		t.Errorf("fs.file-nr not folded: %q", v)
	}
}

func TestFillBroken(t *testing.T) {
	s := fill(t, fixtureFS("broken"))
	wantErr := map[string][]string{
		snapshot.SourceNetstat:  {"procnet: netstat line 4: IpExt has 3 values for 2 names on line 3", `procnet: netstat line 6: MPTcpExt.MPCapableSYNRX: bad value "many"`},
		snapshot.SourceSNMP:     {"procnet: open testdata/broken/net/snmp: no such file"},
		snapshot.SourceSockstat: {"procnet: sockstat line 2: TCP: 3 fields"},
		snapshot.SourceSysctl:   {"procnet: sysctl net.core.somaxconn: read", "is a directory"},
	}
	for src, subs := range wantErr {
		msg, ok := s.Failed(src)
		if !ok {
			t.Errorf("%s: no error recorded", src)
			continue
		}
		for _, sub := range subs {
			if !strings.Contains(msg, sub) {
				t.Errorf("%s error %q lacks %q", src, msg, sub)
			}
		}
	}
	if len(s.Errors) != len(wantErr) {
		t.Errorf("errors %+v, want one per failed source", s.Errors)
	}
	for _, st := range s.Sources {
		if st.OK {
			t.Errorf("source %s OK in the broken fixture", st.Source)
		}
	}
	// What parsed cleanly is kept; the broken groups and lines are not.
	if v, ok := s.Counter("TcpExt.ListenDrops"); !ok || v != 4 {
		t.Errorf("TcpExt.ListenDrops = %d, %v", v, ok)
	}
	for _, k := range []string{"IpExt.InOctets", "MPTcpExt.MPCapableSYNRX"} {
		if _, ok := s.Counter(k); ok {
			t.Errorf("%s kept from a broken group", k)
		}
	}
	if _, ok := s.Sockstat["TCP.inuse"]; ok {
		t.Error("TCP.inuse kept from a broken line")
	}
	if s.Sockstat["UDP.inuse"] != 1 || s.Sockstat["sockets.used"] != 7 {
		t.Errorf("sockstat good lines lost: %v", s.Sockstat)
	}
	if s.Sysctls["net.ipv4.tcp_rmem"] != "4096 131072 6291456" {
		t.Errorf("tcp_rmem = %q", s.Sysctls["net.ipv4.tcp_rmem"])
	}
	if _, ok := s.Sysctls["net.core.somaxconn"]; ok {
		t.Error("somaxconn present although unreadable")
	}
}

// TestSysctlNamesInFixture keeps the list, regen.sh and the fixture in step.
func TestSysctlNamesInFixture(t *testing.T) {
	s := fill(t, fixtureFS("linux-6.18"))
	names := SysctlNames()
	if len(names) != 38 {
		t.Errorf("%d sysctl names, want 38", len(names))
	}
	for _, n := range names {
		_, ok := s.Sysctls[n]
		if want := n != "net.ipv4.tcp_tw_recycle"; ok != want {
			t.Errorf("fixture has %s: %v, want %v", n, ok, want)
		}
	}
	if len(s.Sysctls) != len(names)-1 {
		t.Errorf("fixture has %d sysctls, want %d", len(s.Sysctls), len(names)-1)
	}
	names[0] = "changed"
	if SysctlNames()[0] != "net.core.somaxconn" {
		t.Error("SysctlNames shares its backing array")
	}
}

func TestParseNetstat(t *testing.T) {
	tests := []struct {
		name, in string
		want     map[string]int64
		errs     []string // substrings; none means no error
	}{
		{name: "empty", in: "", want: map[string]int64{}},
		{name: "pair", in: "Tcp: MaxConn ActiveOpens\nTcp: -1 5\n", want: map[string]int64{"Tcp.MaxConn": -1, "Tcp.ActiveOpens": 5}},
		{name: "no trailing newline, blank lines", in: "\nA: x\n\nA: 1", want: map[string]int64{"A.x": 1}},
		{name: "uint64 max saturates", in: "A: x y\nA: 18446744073709551615 9223372036854775807\n",
			want: map[string]int64{"A.x": math.MaxInt64, "A.y": math.MaxInt64}},
		{name: "above uint64", in: "A: x\nA: 18446744073709551616\n", want: map[string]int64{},
			errs: []string{`netstat line 2: A.x: bad value "18446744073709551616"`}},
		{name: "below int64", in: "A: x\nA: -9223372036854775809\n", want: map[string]int64{},
			errs: []string{"line 2: A.x: bad value"}},
		{name: "odd lines", in: "A: x\nA: 1\nB: y\n", want: map[string]int64{"A.x": 1},
			errs: []string{"netstat line 3: B header has no value line"}},
		{name: "count mismatch", in: "A: x y\nA: 1\nB: z\nB: 2\n", want: map[string]int64{"B.z": 2},
			errs: []string{"line 2: A has 1 values for 2 names on line 1"}},
		{name: "group mismatch resyncs", in: "A: x\nB: y\nB: 7\n", want: map[string]int64{"B.y": 7},
			errs: []string{"line 1: A header has no value line (line 2 is B)"}},
		{name: "non-numeric", in: "A: x y\nA: 1 z\n", want: map[string]int64{},
			errs: []string{`line 2: A.y: bad value "z"`}},
		{name: "no colon", in: "A x\nA: x\nA: 1\n", want: map[string]int64{"A.x": 1},
			errs: []string{`line 1: no "Group:" prefix`}},
		{name: "bad group", in: "A B: x\nA B: 1\n", want: map[string]int64{},
			errs: []string{`line 1: bad group name "A B"`, "line 2"}},
		{name: "many errors capped", in: strings.Repeat("x\n", 9), want: map[string]int64{},
			errs: []string{"line 5:", "netstat: 4 more errors"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]int64{}
			err := ParseNetstat(strings.NewReader(tt.in), got)
			checkErr(t, err, tt.errs)
			checkMap(t, got, tt.want)
		})
	}
}

func TestParseSockstat(t *testing.T) {
	tests := []struct {
		name, in string
		want     map[string]int64
		errs     []string
	}{
		{name: "real lines", in: "sockets: used 12\nTCP: inuse 1 orphan 0 tw 3 alloc 1 mem 95\nTCP6: inuse 0\nFRAG: inuse 0 memory 0\n",
			want: map[string]int64{"sockets.used": 12, "TCP.inuse": 1, "TCP.orphan": 0, "TCP.tw": 3, "TCP.alloc": 1, "TCP.mem": 95, "TCP6.inuse": 0, "FRAG.inuse": 0, "FRAG.memory": 0}},
		{name: "odd fields", in: "TCP: inuse\nUDP: inuse 2\n", want: map[string]int64{"UDP.inuse": 2},
			errs: []string{"sockstat line 1: TCP: 1 fields, want key value pairs"}},
		{name: "bad value", in: "TCP: inuse 1 tw x\n", want: map[string]int64{},
			errs: []string{`sockstat line 1: TCP.tw: bad value "x"`}},
		{name: "no colon", in: "TCP inuse 1\n", want: map[string]int64{}, errs: []string{"line 1: no"}},
		{name: "above uint64", in: "TCP: mem 99999999999999999999\n", want: map[string]int64{}, errs: []string{"bad value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]int64{}
			err := ParseSockstat(strings.NewReader(tt.in), got)
			checkErr(t, err, tt.errs)
			checkMap(t, got, tt.want)
		})
	}
}

func checkErr(t *testing.T, err error, subs []string) {
	t.Helper()
	if len(subs) == 0 {
		if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %q", subs)
	}
	if !strings.HasPrefix(err.Error(), "procnet: ") {
		t.Errorf("error %q lacks the procnet: prefix", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func checkMap(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
		return
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d, %v; want %d", k, g, ok, v)
		}
	}
}

func TestReadSysctl(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "net", "ipv4"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net", "ipv4", "tcp_wmem"), []byte("4096\t16384\t4194304\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := ReadSysctl(dir, "net.ipv4.tcp_wmem")
	if err != nil || v != "4096 16384 4194304" {
		t.Errorf("ReadSysctl = %q, %v", v, err)
	}
	_, err = ReadSysctl(dir, "net.ipv4.tcp_tw_recycle")
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "procnet: sysctl net.ipv4.tcp_tw_recycle: ") {
		t.Errorf("absent sysctl: %v", err)
	}
	big := filepath.Join(dir, "net", "ipv4", "ip_local_reserved_ports")
	if err := os.WriteFile(big, bytes.Repeat([]byte("1,"), maxSysctlSize/2+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSysctl(dir, "net.ipv4.ip_local_reserved_ports"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("oversized sysctl: %v", err)
	}
	for _, bad := range []string{"", "net..x", "net/../../etc/passwd", ".net", "net.", "a.b\x00"} {
		if _, err := ReadSysctl(dir, bad); err == nil || !strings.Contains(err.Error(), "bad name") {
			t.Errorf("ReadSysctl(%q) = %v, want bad name", bad, err)
		}
	}
}

func TestPortRange(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"32768 60999", 32768, 60999, true},
		{"1024 1024", 1024, 1024, true},
		{"0 65535", 0, 65535, true},
		{"60999 32768", 0, 0, false},
		{"32768", 0, 0, false},
		{"1 2 3", 0, 0, false},
		{"1 65536", 0, 0, false},
		{"-1 5", 0, 0, false},
		{"a b", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		lo, hi, err := PortRange(tt.in)
		if (err == nil) != tt.ok || lo != tt.lo || hi != tt.hi {
			t.Errorf("PortRange(%q) = %d, %d, %v", tt.in, lo, hi, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "procnet: ip_local_port_range ") {
			t.Errorf("error %q", err)
		}
	}
}

func TestReservedPorts(t *testing.T) {
	tests := []struct {
		in   string
		want [][2]int
		ok   bool
	}{
		{"", nil, true},
		{" \n", nil, true},
		{"8000-8080,9000", [][2]int{{8000, 8080}, {9000, 9000}}, true},
		{"9000\n", [][2]int{{9000, 9000}}, true},
		{"1-2, 4", [][2]int{{1, 2}, {4, 4}}, true},
		{"8080-8000", nil, false},
		{"8000-", nil, false},
		{"8000,,9000", nil, false},
		{"70000", nil, false},
		{"1-2-3", nil, false},
		{"x", nil, false},
	}
	for _, tt := range tests {
		got, err := ReservedPorts(tt.in)
		if (err == nil) != tt.ok || len(got) != len(tt.want) {
			t.Errorf("ReservedPorts(%q) = %v, %v", tt.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ReservedPorts(%q) = %v, want %v", tt.in, got, tt.want)
			}
		}
	}
}

func TestCountReservedIn(t *testing.T) {
	tests := []struct {
		ranges [][2]int
		lo, hi int
		want   int
	}{
		{nil, 32768, 60999, 0},
		{[][2]int{{8000, 8080}, {9000, 9000}}, 32768, 60999, 0},
		{[][2]int{{32768, 32768}}, 32768, 60999, 1},
		{[][2]int{{30000, 33000}, {60000, 65535}}, 32768, 60999, 233 + 1000},
		{[][2]int{{40000, 40100}, {40050, 40200}, {40000, 40000}}, 32768, 60999, 201},
		{[][2]int{{40050, 40200}, {40000, 40100}}, 32768, 60999, 201},
		{[][2]int{{40000, 41000}, {40100, 40200}, {40900, 41100}}, 32768, 60999, 1101},
		{[][2]int{{5, 3}}, 0, 10, 0},
		{[][2]int{{0, 65535}}, 10, 5, 0},
	}
	for _, tt := range tests {
		if got := CountReservedIn(tt.ranges, tt.lo, tt.hi); got != tt.want {
			t.Errorf("CountReservedIn(%v, %d, %d) = %d, want %d", tt.ranges, tt.lo, tt.hi, got, tt.want)
		}
		if got := bruteCount(tt.ranges, tt.lo, tt.hi); got != tt.want {
			t.Errorf("brute force disagrees with the table: %v: %d", tt.ranges, got)
		}
	}
}

// bruteCount is CountReservedIn by enumeration, for small ranges.
func bruteCount(ranges [][2]int, lo, hi int) int {
	n := 0
	for p := lo; p <= hi; p++ {
		for _, r := range ranges {
			if r[0] <= p && p <= r[1] {
				n++
				break
			}
		}
	}
	return n
}

func BenchmarkFill(b *testing.B) {
	for _, bc := range []struct {
		name string
		fs   FS
	}{{"live", Default()}, {"fixture", fixtureFS("linux-6.18")}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.fs.Fill(&snapshot.Snapshot{})
			}
		})
	}
}

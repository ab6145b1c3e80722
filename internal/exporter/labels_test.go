// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	for _, c := range []struct{ in, want string }{
		{"nginx", "nginx"},
		{"é中", "é中"},
		{"a\xffb", `a\xffb`},
		{"\x1b[31mred\a\r", `\x1b[31mred\a\r`},
		{"evil\u202etxt", `evil\u202etxt`},
	} {
		if got := labelValue(c.in); got != c.want {
			t.Errorf("labelValue(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	a, b := labelValue(long), labelValue(long+"y")
	if len(a) > maxLabelLen || len(b) > maxLabelLen || a == b || !strings.HasPrefix(a, "xxxx") {
		t.Errorf("long values: %q and %q: want two distinct values of at most %d bytes", a, b, maxLabelLen)
	}
	for _, v := range []string{long, "\xff" + long, strings.Repeat("中", 300), strings.Repeat("\u202e", 300)} {
		got := labelValue(v)
		if len(got) > maxLabelLen || !utf8.ValidString(got) || labelValue(got) != got {
			t.Errorf("labelValue of %d bytes: %q (%d bytes): not bounded, not UTF-8 or not stable", len(v), got, len(got))
		}
	}
}

// hostile is a name a workload can choose: bytes that are not UTF-8
// (PR_SET_NAME takes any), a terminal escape, BEL, CR and a bidi
// override.
const hostile = "\xff\xfe\x1b[2J\a\r\u202e"

// capPair is the app-connection-cap fixture: nginx at its own limit,
// findings, listeners and its cap; with hostile names for its processes,
// workloads and the cap's setting (a 1 MiB haproxy-style frontend name)
// when evil.
func capPair(t *testing.T, evil bool) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open("../rules/testdata/app-connection-cap/fires.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		name := "pod"
		if evil {
			name = hostile + strings.Repeat("p", 1<<20)
		}
		s.Netns.Workload = &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef", Container: name + "c", Pod: name, PodNamespace: name + "ns"}
		for _, p := range s.Procs {
			p.Workload = &snapshot.Workload{Runtime: "containerd", ID: "fedcba9876543210", Container: name + "app", Pod: name, PodNamespace: name + "ns"}
			if evil {
				p.Command = p.Command + hostile
			}
		}
		for i := range s.AppCaps {
			if evil {
				s.AppCaps[i].Setting = "maxconn (frontend " + strings.Repeat("f", 1<<20) + hostile + ")"
			}
		}
	}
	return snaps
}

// TestHostileLabels: every family gathered with hostile names (a process
// name that is not UTF-8, control characters and U+202E in a pod's
// names, a 1 MiB frontend name) has every series it has with plain names,
// each label value valid UTF-8, without control characters and bounded,
// and the scrape stays about the size of the plain one.
func TestHostileLabels(t *testing.T) {
	gather := func(evil bool) ([]*dto.MetricFamily, int) {
		x := NewTested(rules.All(), Options{Clock: fixedClock})
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(x)
		snaps := capPair(t, evil)
		x.Update(snaps[:1], 0)
		x.Update(snaps[1:], 0)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather (evil %v): %v", evil, err)
		}
		return mfs, len(scrape(t, reg))
	}
	plain, plainSize := gather(false)
	evil, evilSize := gather(true)
	count := func(mfs []*dto.MetricFamily) map[string]int {
		out := map[string]int{}
		for _, mf := range mfs {
			out[mf.GetName()] = len(mf.GetMetric())
		}
		return out
	}
	pc, ec := count(plain), count(evil)
	for _, name := range []string{"tcpdoctor_app_connection_limit", "tcpdoctor_app_connections", "tcpdoctor_finding",
		"tcpdoctor_listener_connections", "tcpdoctor_accept_queue_length", "tcpdoctor_sockets"} {
		if pc[name] == 0 {
			t.Errorf("the plain fixture has no %s series", name)
		}
	}
	for name, n := range pc {
		if ec[name] != n {
			t.Errorf("%s: %d series with plain names, %d with hostile ones", name, n, ec[name])
		}
	}
	for _, mf := range evil {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if !utf8.ValidString(v) || len(v) > maxLabelLen || strings.ContainsAny(v, "\x1b\a\r\n\u202e") {
					t.Errorf("%s{%s=%q}: not valid UTF-8, unbounded or with a control character", mf.GetName(), l.GetName(), v)
				}
			}
		}
	}
	if evilSize > 2*plainSize+64<<10 {
		t.Errorf("scrape of %d bytes with hostile names, %d with plain ones", evilSize, plainSize)
	}
	t.Logf("scrape: %d bytes with plain names, %d with hostile ones", plainSize, evilSize)
	if !bytes.Contains([]byte(hostile), []byte{0xff}) {
		t.Fatal("the hostile name lost its invalid byte")
	}
}

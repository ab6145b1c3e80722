// SPDX-License-Identifier: Apache-2.0

package report

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// hostile is a process name any local user can set (prctl PR_SET_NAME):
// printed raw it retitles the window, clears the screen and starts a
// forged line.
const hostile = "\x1b]0;PWN\x07\x1b[2J\nX"

// zoned is an address whose IPv6 zone is zone: the one outside string
// an address carries.
func zoned(zone string, port uint16) diag.Address {
	return diag.At(netip.AddrPortFrom(netip.MustParseAddr("fe80::1%"+zone), port))
}

// TestWriteTextEscapes puts hostile in every string a finding, an
// unknown rule and a source error carry: none reaches the text raw.
func TestWriteTextEscapes(t *testing.T) {
	h := hostile
	r := &Report{
		Netns:   []string{h, "other"},
		Sockets: 3,
		Findings: []diag.Finding{{
			Rule: "rule" + h, Severity: diag.Critical,
			Subject: diag.Subject{Netns: h, Local: zoned(h, 1), Remote: zoned(h, 2), Service: zoned("svc"+h, 3), Pid: 7, Command: h,
				Peers: []diag.Count{{Key: h, N: 2}, {Key: "b", N: 1}}, Ports: []diag.Count{{Key: h, N: 1}}},
			Summary:  h,
			Evidence: []diag.Evidence{{Name: h, Value: h, Source: h, Threshold: h}},
			Fixes:    []diag.Fix{{Scope: "application", Target: h, Text: h, Command: "first\n" + h, Risk: h}},
		}},
		Unknown: []diag.Unknown{{Rule: h, Netns: h, Reason: h}},
		Sources: []SourceError{{Netns: h, Source: h, Error: h}},
	}
	var b bytes.Buffer
	WriteText(&b, r, Style{Color: true, MinSeverity: diag.Warning})
	out := b.String()
	// The only escapes are tcpdoctor's own colours.
	for _, c := range []string{red, yellow, dim, reset} {
		out = strings.ReplaceAll(out, c, "")
	}
	if i := strings.IndexAny(out, "\x1b\x07"); i >= 0 {
		t.Errorf("raw ESC or BEL: %q", out[max(i-40, 0):min(i+40, len(out))])
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "X") {
			t.Errorf("forged line %q", l)
		}
	}
	// Every field but Scope (ours) carries hostile once: 8 in the subject
	// line, the summary, 4 in the evidence, 4 in the fix, 3 in the
	// UNKNOWN line and 3 in the NOTE line.
	const escaped = `\x1b]0;PWN\a\x1b[2J\nX`
	if n, want := strings.Count(out, escaped), 23; n != want {
		t.Errorf("%q appears %d times, want %d:\n%s", escaped, n, want, out)
	}
	if !strings.Contains(out, "        first\\n"+escaped+"\n") {
		t.Errorf("a fix command is not one line:\n%s", out)
	}
}

// A fix in a pod prints its pod spec under the fix, a line at a time
// (remedy builds it of sysctl names and numbers only), each escaped; a
// hostile pod name forges no line.
func TestWriteTextPodSpec(t *testing.T) {
	yaml := "spec:\n  securityContext:\n    sysctls:\n    - name: net.core.somaxconn  # unsafe: needs kubelet --allowed-unsafe-sysctls\n      value: \"4096\"\n"
	r := &Report{Findings: []diag.Finding{{
		Rule: "listen-overflow", Severity: diag.Critical, Subject: diag.Subject{Workload: &snapshot.Workload{Pod: "web-1", PodNamespace: "shop"}},
		Fixes: []diag.Fix{{Scope: "kernel", Target: "sysctl", Text: "raise somaxconn",
			Pod: &diag.PodFix{Pod: "shop/web-1" + hostile, YAML: yaml + "\x1b]0;PWN\x07"}}},
	}}}
	var b bytes.Buffer
	WriteText(&b, r, Style{MinSeverity: diag.Warning})
	out := b.String()
	want := "    - [kernel/sysctl] raise somaxconn\n" +
		"        pod shop/web-1\\x1b]0;PWN\\a\\x1b[2J\\nX spec:\n" +
		"          spec:\n            securityContext:\n              sysctls:\n" +
		"              - name: net.core.somaxconn  # unsafe: needs kubelet --allowed-unsafe-sysctls\n" +
		"                value: \"4096\"\n" +
		"          \\x1b]0;PWN\\a\n"
	if !strings.Contains(out, want) {
		t.Errorf("fix in a pod printed as\n%s\nwant\n%s", out, want)
	}
}

// A host-wide note (no namespace) says so: no "in netns" with nothing
// after it.
func TestWriteTextHostNote(t *testing.T) {
	r := &Report{Netns: []string{"host"}, Sources: []SourceError{
		{Netns: "host", Source: "netstat", Error: "gone"},
		{Source: "bpf", Error: "the kernel skipped 2 runs"},
	}}
	var b bytes.Buffer
	WriteText(&b, r, Style{MinSeverity: diag.Warning})
	for _, want := range []string{"NOTE source netstat in netns host incomplete: gone\n", "NOTE source bpf incomplete: the kernel skipped 2 runs\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestSubjectText: the one text of a subject, from its typed addresses
// and the workload the engine named, is the same text history prints of
// the subject read back from its JSON (which keeps the workload's names,
// not its id).
func TestSubjectText(t *testing.T) {
	api := &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef0123", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "aaaaaaaaaaaaaaaa", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	web := &snapshot.Workload{Runtime: "docker", ID: "fedcba9876543210fedc", Container: "web"}
	local, remote := diag.At(netip.MustParseAddrPort("[2001:db8::1]:8080")), diag.Host(netip.MustParseAddr("2001:db8::50"))
	for _, c := range []struct {
		s    diag.Subject
		want string
	}{
		{diag.Subject{Netns: "shop/web-1", Local: local, Remote: remote, Pid: 7, Command: "api-server", Workload: api},
			"[2001:db8::1]:8080 -> 2001:db8::50 (api-server pid 7) pod shop/web-1 container api"},
		{diag.Subject{Netns: "shop/web-1", Local: local, Service: diag.At(netip.MustParseAddrPort("[::]:8080")), Workload: sandbox},
			"[2001:db8::1]:8080 service [::]:8080 pod shop/web-1"},
		{diag.Subject{Netns: "cni-1234", Remote: remote, Workload: api, Peers: []diag.Count{{Key: "2001:db8::50", N: 2}, {Key: "2001:db8::51", N: 1}}},
			"-> 2001:db8::50 peers 2001:db8::50 2, 2001:db8::51 1 pod shop/web-1 container api netns cni-1234"},
		{diag.Subject{Netns: "pid:9", Pid: 9, Command: "nginx", Workload: web}, "(nginx pid 9) container web netns pid:9"},
		{diag.Subject{Netns: "host", Pid: 812, Command: "sshd", Workload: &snapshot.Workload{Runtime: "systemd", Unit: "sshd.service"}},
			"(sshd pid 812) unit sshd.service netns host"},
	} {
		if got := SubjectText(c.s); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.s, got, c.want)
		}
		b, err := json.Marshal(c.s)
		if err != nil {
			t.Fatal(err)
		}
		var back diag.Subject
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := SubjectText(back); got != c.want {
			t.Errorf("read back from %s:\n got %q\nwant %q", b, got, c.want)
		}
	}
}

// TestWriteTextWidth: at a terminal's width every line but a command
// fits, the finding's heading and the closing line included, and the
// words are those of the unwrapped text.
func TestWriteTextWidth(t *testing.T) {
	r := &Report{
		Netns:   []string{"tdlab-2b8705-server"},
		Sockets: 530, RulesRun: make([]string, 14),
		Window: Window{Seconds: 3},
		Findings: []diag.Finding{{
			Rule: "rwnd-limited", Severity: diag.Warning,
			Subject: diag.Subject{Netns: "tdlab-2b8705-server", Local: zoned("x", 54753), Remote: zoned("y", 40346), Pid: 26780, Command: "livetest.test"},
			Summary: "short",
			Fixes:   []diag.Fix{{Scope: "host", Text: "t", Command: strings.Repeat("sysctl ", 20)}},
		}, {Rule: "slow-reader", Severity: diag.Info, Summary: "hidden"}},
	}
	var flat, b bytes.Buffer
	WriteText(&flat, r, Style{MinSeverity: diag.Warning})
	WriteText(&b, r, Style{MinSeverity: diag.Warning, Width: 80})
	for _, l := range strings.Split(b.String(), "\n") {
		if n := len([]rune(l)); n > 80 && !strings.HasPrefix(l, "        sysctl") {
			t.Errorf("line of %d: %q", n, l)
		}
	}
	if strings.Join(strings.Fields(b.String()), " ") != strings.Join(strings.Fields(flat.String()), " ") {
		t.Errorf("the words differ from the unwrapped text:\n%s", b.String())
	}
	if !strings.Contains(flat.String(), "1 info finding hidden") {
		t.Errorf("no hidden-finding count in:\n%s", flat.String())
	}
}

// SPDX-License-Identifier: Apache-2.0

package report

import (
	"bytes"
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

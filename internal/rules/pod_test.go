// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// The fixes of a finding in a Kubernetes pod, tested on the rules'
// own firing fixtures as if their namespace were pod shop/web-1's (its
// processes in container api), through report.Diagnose: the path check,
// serve and the lab take. Each is compared with the same fixture outside
// a pod, so the values are the rule's, only restated.

// podFixes runs r over the fixture at path, in pod shop/web-1 when pod
// is set (hostNet: the pod does not hold the namespace), after edit.
func podFixes(t *testing.T, r diag.Rule, path string, pod, hostNet bool, o diag.Options, edit func(*snapshot.Snapshot)) []diag.Finding {
	t.Helper()
	snaps := readSnaps(t, path)
	cur := snaps[len(snaps)-1]
	var prev *snapshot.Snapshot
	if len(snaps) > 1 {
		prev = snaps[0]
	}
	for _, s := range snaps {
		if edit != nil {
			edit(s)
		}
		if !pod {
			continue
		}
		app := &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("a1", 32), Container: "api", Pod: "web-1", PodNamespace: "shop", PodUID: "0c3e9c2f"}
		if !hostNet {
			s.Netns.Workload = &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("5b", 32), Pod: "web-1", PodNamespace: "shop", PodUID: "0c3e9c2f", Sandbox: true}
		}
		for _, p := range s.Procs {
			p.Workload = app
		}
	}
	rep := report.Diagnose(slices.Values([]*diag.Input{diag.NewInput(prev, cur, o)}), []diag.Rule{r})
	if len(rep.Findings) == 0 {
		t.Fatalf("%s: no finding (unknown: %+v)", path, rep.Unknown)
	}
	return rep.Findings
}

// kernelFix is the finding's kernel fix whose text (in a pod, after the
// rule's own) starts as want does, nil when none.
func kernelFix(fs []diag.Finding, text string) (*diag.Finding, *diag.Fix) {
	for i := range fs {
		for j := range fs[i].Fixes {
			if fx := &fs[i].Fixes[j]; fx.Scope == "kernel" && strings.HasPrefix(fx.Text, text) {
				return &fs[i], fx
			}
		}
	}
	return nil, nil
}

// hostValue is the value the fix's host command sets name to.
func hostValue(t *testing.T, f *diag.Fix, name string) string {
	t.Helper()
	_, v, ok := strings.Cut(f.Command, name+"=")
	if !ok || v == "" {
		t.Fatalf("host command %q does not set %s", f.Command, name)
	}
	if q := v[0]; q == '"' || q == '\'' {
		v, _, _ = strings.Cut(v[1:], string(q))
		return v
	}
	if end := strings.IndexAny(v, " ;&"); end >= 0 {
		v = v[:end]
	}
	return v
}

// podSysctl checks that a pod fix sets name to want in the pod spec, as
// safe (since the version) or unsafe, with no host sysctl -w left.
func podSysctl(t *testing.T, f *diag.Fix, name, want, safeSince string) {
	t.Helper()
	p := f.Pod
	if p == nil {
		t.Fatalf("fix %q has no pod form", f.Text)
	}
	var got *diag.PodSysctl
	for i := range p.Sysctls {
		if p.Sysctls[i].Name == name {
			got = &p.Sysctls[i]
		}
	}
	if got == nil || got.Value != want || got.Safe != (safeSince != "") || got.SafeSince != safeSince {
		t.Errorf("pod sysctls %+v, want %s=%q safe since %q", p.Sysctls, name, want, safeSince)
	}
	if p.Pod != "shop/web-1" || p.HostNetwork {
		t.Errorf("pod %q host network %v", p.Pod, p.HostNetwork)
	}
	line := "- name: " + name + "  # "
	if safeSince != "" {
		line += "safe since Kubernetes " + safeSince
	} else {
		line += "unsafe: needs kubelet --allowed-unsafe-sysctls"
	}
	if !strings.HasPrefix(p.YAML, "spec:\n  securityContext:\n    sysctls:\n") || !strings.Contains(p.YAML, line+"\n      value: \""+want+"\"\n") {
		t.Errorf("pod spec YAML:\n%s\nwant the line %q with value %q", p.YAML, line, want)
	}
	if strings.Contains(f.Command, name) {
		t.Errorf("a host command for %s is still given: %q", name, f.Command)
	}
	if !strings.Contains(f.Text, "securityContext.sysctls") || !strings.Contains(f.Text, "does not reach the pod's network namespace") {
		t.Errorf("text does not say where it goes: %q", f.Text)
	}
	flag := strings.Contains(p.Kubelet, name)
	if safeSince == "" && (!flag || !strings.Contains(f.Text, "--allowed-unsafe-sysctls=")) {
		t.Errorf("unsafe %s without the kubelet flag: %q, text %q", name, p.Kubelet, f.Text)
	}
	if safeSince != "" && flag {
		t.Errorf("safe %s asks for the kubelet flag %q", name, p.Kubelet)
	}
}

// Port exhaustion in a pod: the wider ip_local_port_range the rule
// computed, in the pod spec, safe by default.
func TestPodFixPortExhaustion(t *testing.T) {
	const path = "testdata/port-exhaustion/fires.jsonl"
	_, host := kernelFix(podFixes(t, portExhaustion(), path, false, false, diag.Options{}, nil), "widen the ephemeral range")
	f, pod := kernelFix(podFixes(t, portExhaustion(), path, true, false, diag.Options{}, nil), "widen the ephemeral range")
	if host == nil || pod == nil {
		t.Fatal("no widen-the-range fix")
	}
	if host.Pod != nil || !strings.Contains(host.Command, "sysctl -w") {
		t.Errorf("outside a pod the fix changed: %+v", host)
	}
	if f.Subject.Workload.PodName() != "shop/web-1" || f.Subject.Workload.ContainerName() != "api" {
		t.Errorf("subject %+v", f.Subject)
	}
	podSysctl(t, pod, "net.ipv4.ip_local_port_range", hostValue(t, host, "net.ipv4.ip_local_port_range"), "1.11")
	if pod.Command != "" || pod.Pod.Kubelet != "" || len(pod.Pod.Node) != 0 {
		t.Errorf("command %q, kubelet %q, node %v: want none", pod.Command, pod.Pod.Kubelet, pod.Pod.Node)
	}
}

// Listen overflow in a pod: somaxconn in the pod spec, unsafe, with the
// kubelet flag; the backlog the application asks for in container api.
func TestPodFixListenOverflow(t *testing.T) {
	const path = "testdata/listen-overflow/fires.jsonl"
	low := func(s *snapshot.Snapshot) { s.Sysctls["net.core.somaxconn"] = "128" }
	_, host := kernelFix(podFixes(t, listenOverflow(), path, false, false, diag.Options{}, low), "raise the cap on every listener's backlog")
	fs := podFixes(t, listenOverflow(), path, true, false, diag.Options{}, low)
	f, pod := kernelFix(fs, "raise the cap on every listener's backlog")
	if host == nil || pod == nil {
		t.Fatal("no somaxconn fix")
	}
	n := hostValue(t, host, "net.core.somaxconn")
	t.Logf("outside a pod: %s\n%s", host.Text, host.Command)
	t.Logf("in pod shop/web-1: %s\nkubelet %s\n%s", pod.Text, pod.Pod.Kubelet, pod.Pod.YAML)
	podSysctl(t, pod, "net.core.somaxconn", n, "")
	if pod.Pod.Kubelet != "--allowed-unsafe-sysctls=net.core.somaxconn" || pod.Command != "" {
		t.Errorf("kubelet %q, command %q", pod.Pod.Kubelet, pod.Command)
	}
	var app int
	for _, fx := range f.Fixes {
		if fx.Scope != "application" || fx.Command == "" {
			continue
		}
		app++
		if fx.Pod == nil || fx.Pod.Container != "api" || !strings.Contains(fx.Text, "in the pod spec's container api") {
			t.Errorf("application fix not placed in container api: %+v", fx)
		}
		if fx.Target == "netty" && !strings.Contains(fx.Command, "SO_BACKLOG, "+n+")") {
			t.Errorf("netty backlog %q is not the pod's somaxconn %s", fx.Command, n)
		}
	}
	if app == 0 {
		t.Error("no application fix")
	}
}

// TIME_WAIT churn in a pod: tcp_tw_reuse unsafe, the port range safe;
// both values the rule's.
func TestPodFixTimeWait(t *testing.T) {
	const path = "testdata/time-wait-churn/fires.jsonl"
	hostFs := podFixes(t, timeWaitChurn(), path, false, false, diag.Options{}, nil)
	podFs := podFixes(t, timeWaitChurn(), path, true, false, diag.Options{}, nil)
	_, hostReuse := kernelFix(hostFs, "let connect() take over")
	_, reuse := kernelFix(podFs, "let connect() take over")
	_, hostRange := kernelFix(hostFs, "widen the ephemeral range")
	_, wide := kernelFix(podFs, "widen the ephemeral range")
	if hostReuse == nil || reuse == nil || hostRange == nil || wide == nil {
		t.Fatal("missing tcp_tw_reuse or port range fix")
	}
	podSysctl(t, reuse, "net.ipv4.tcp_tw_reuse", hostValue(t, hostReuse, "net.ipv4.tcp_tw_reuse"), "")
	if reuse.Pod.Kubelet != "--allowed-unsafe-sysctls=net.ipv4.tcp_tw_reuse" {
		t.Errorf("kubelet %q", reuse.Pod.Kubelet)
	}
	podSysctl(t, wide, "net.ipv4.ip_local_port_range", hostValue(t, hostRange, "net.ipv4.ip_local_port_range"), "1.11")
}

// Buffer limits in a pod: tcp_wmem and tcp_rmem (safe since 1.32) in the
// pod spec; net.core.wmem_max is the node's, for every pod there, so its
// command stays, said to be run on the node.
func TestPodFixBuffers(t *testing.T) {
	const path = "testdata/buffer-limits/fires.jsonl"
	fast := diag.Options{Bandwidth: 40e9}
	hostFs := podFixes(t, bufferLimits(), path, false, false, fast, nil)
	podFs := podFixes(t, bufferLimits(), path, true, false, fast, nil)
	_, hostMax := kernelFix(hostFs, "raise wmem_max")
	_, wmemMax := kernelFix(podFs, "raise wmem_max")
	if hostMax == nil || wmemMax == nil {
		t.Fatal("no wmem_max fix")
	}
	v := hostValue(t, hostMax, "net.core.wmem_max")
	if p := wmemMax.Pod; p == nil || len(p.Sysctls) != 0 || p.YAML != "" || !slices.Equal(p.Node, []string{"net.core.wmem_max=" + v}) {
		t.Fatalf("wmem_max pod form %+v, want node-level net.core.wmem_max=%s", wmemMax.Pod, v)
	}
	if wmemMax.Command != "sysctl -w net.core.wmem_max="+v+"  (on the node; persist in /etc/sysctl.d/)" ||
		!strings.Contains(wmemMax.Text, "net.core.wmem_max="+v+" is not per network namespace: set on the node, it applies to every pod there") {
		t.Errorf("node-level fix: command %q, text %q", wmemMax.Command, wmemMax.Text)
	}
	for _, name := range []string{"net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"} {
		var hf, pf *diag.Fix
		for i := range hostFs {
			for j := range hostFs[i].Fixes {
				if strings.Contains(hostFs[i].Fixes[j].Command, name+"=") {
					hf, pf = &hostFs[i].Fixes[j], &podFs[i].Fixes[j]
				}
			}
		}
		if hf == nil {
			t.Fatalf("no %s fix at 40 Gbit/s", name)
		}
		podSysctl(t, pf, name, hostValue(t, hf, name), "1.32")
	}
}

// rwnd-limited with the receiver outside the snapshot: its fixes are the
// receiving host's, not the pod's: left as they are.
func TestPodFixPeerUntouched(t *testing.T) {
	const path = "testdata/rwnd-limited/fires.jsonl"
	hostFs := podFixes(t, rwndLimited(), path, false, false, diag.Options{Bandwidth: 1e9}, nil)
	podFs := podFixes(t, rwndLimited(), path, true, false, diag.Options{Bandwidth: 1e9}, nil)
	peers := 0
	for i := range podFs {
		for j, fx := range podFs[i].Fixes {
			if fx.Peer {
				peers++
			}
			if fx.Peer && (fx.Pod != nil || fx.Text != hostFs[i].Fixes[j].Text || fx.Command != hostFs[i].Fixes[j].Command) {
				t.Errorf("a fix of the receiver was restated for the sender's pod: %+v", fx)
			}
		}
	}
	if peers < 3 {
		t.Errorf("%d fixes of the receiver, want its two application fixes and its host's sysctls", peers)
	}
}

// A pod with hostNetwork: true does not hold the namespace: no pod spec
// sysctls; the command sets the node's, and says so.
func TestPodFixHostNetwork(t *testing.T) {
	fs := podFixes(t, portExhaustion(), "testdata/port-exhaustion/fires.jsonl", true, true, diag.Options{}, nil)
	_, f := kernelFix(fs, "widen the ephemeral range")
	if f == nil || f.Pod == nil || !f.Pod.HostNetwork || f.Pod.YAML != "" || !strings.Contains(f.Command, "sysctl -w net.ipv4.ip_local_port_range=") ||
		!strings.Contains(f.Text, "hostNetwork") {
		t.Errorf("hostNetwork pod fix: %+v", f)
	}
}

// Every kernel fix any fixture gives with a sysctl -w is restated in a
// pod, each sysctl it sets either in the pod spec or on the node: a
// command the one parser (remedy.InPods) cannot read fails here.
func TestPodFixEverySysctl(t *testing.T) {
	fixtures, err := filepath.Glob("testdata/*/*.jsonl")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seen := 0
	for _, path := range fixtures {
		if len(readSnaps(t, path)) < 2 {
			continue
		}
		for _, f := range podFixesAll(t, path) {
			for _, fx := range f.Fixes {
				if fx.Scope != "kernel" || fx.Peer || fx.Pod == nil && !strings.Contains(fx.Command, "sysctl") {
					continue
				}
				if fx.Pod == nil {
					t.Errorf("%s %s: kernel fix not restated in the pod: %+v", path, f.Rule, fx)
					continue
				}
				seen++
				if len(fx.Pod.Sysctls)+len(fx.Pod.Node) == 0 || strings.Contains(fx.Command, "sysctl -w") && len(fx.Pod.Node) == 0 {
					t.Errorf("%s %s: %+v", path, f.Rule, fx)
				}
			}
		}
	}
	t.Logf("%d kernel fixes restated in a pod over every fixture", seen)
	if seen < 5 {
		t.Errorf("only %d kernel fixes restated over every fixture", seen)
	}
}

// podFixesAll runs every rule over a fixture in pod shop/web-1.
func podFixesAll(t *testing.T, path string) []diag.Finding {
	t.Helper()
	var fs []diag.Finding
	for _, r := range All() {
		snaps := readSnaps(t, path)
		for _, s := range snaps {
			s.Netns.Workload = &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("5b", 32), Pod: "web-1", PodNamespace: "shop", Sandbox: true}
		}
		rep := report.Diagnose(slices.Values([]*diag.Input{diag.NewInput(snaps[0], snaps[len(snaps)-1], diag.Options{})}), []diag.Rule{r})
		fs = append(fs, rep.Findings...)
	}
	return fs
}

// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// InPods restates the fixes of findings whose subject is in a Kubernetes
// pod (Subject.Workload, named by the engine) in the pod's terms: a namespaced
// sysctl goes in the pod spec's securityContext.sysctls (a host sysctl -w
// does not reach the pod's network namespace), saying whether the
// kubelet allows it by default; a sysctl that is not per network
// namespace is set on the node, for every pod there; an application
// setting goes in the pod's container. ns is the namespace the findings
// were made in. Rules stay pod-agnostic: this is the one place fixes
// learn of pods (docs/containers.md, "Fixes in a pod").
func InPods(fs []diag.Finding, ns *snapshot.Netns) {
	for i := range fs {
		w := fs[i].Subject.Workload
		pod := w.PodName()
		if pod == "" {
			continue
		}
		// A pod with hostNetwork: true runs in the node's namespace, which
		// its own sandbox does not hold.
		hostNet := ns == nil || ns.Workload.PodName() != pod
		for j := range fs[i].Fixes {
			inPod(&fs[i].Fixes[j], pod, w.ContainerName(), hostNet)
		}
	}
}

func inPod(f *diag.Fix, pod, container string, hostNet bool) {
	if f.Peer || f.Pod != nil {
		return
	}
	if f.Scope == "application" {
		if container != "" && f.Command != "" {
			f.Pod = &diag.PodFix{Pod: pod, Container: container}
			f.Text += fmt.Sprintf(" (pod %s: in the pod spec's container %s, its image, configuration, args or env)", pod, container)
		}
		return
	}
	if len(f.Sysctls) == 0 {
		return
	}
	var rest []string
	if f.Pre != "" {
		rest = append(rest, f.Pre)
	}
	pf := &diag.PodFix{Pod: pod, Container: container}
	f.Pod = pf
	if hostNet {
		pf.HostNetwork = true
		f.Text += fmt.Sprintf(" (pod %s does not hold this network namespace (hostNetwork): no net.* sysctl can be set in its spec; the command sets the node's, for every pod on the node's network)", pod)
		return
	}
	var node []diag.Sysctl
	var unsafe []string
	for _, s := range f.Sysctls {
		if !PerNetns(s.Name) {
			node = append(node, s)
			pf.Node = append(pf.Node, s.Name+"="+s.Value)
			continue
		}
		since := KubeSafeSince(s.Name)
		pf.Sysctls = append(pf.Sysctls, diag.PodSysctl{Name: s.Name, Value: s.Value, Safe: since != "", SafeSince: since})
		if since == "" {
			unsafe = append(unsafe, s.Name)
		}
	}
	var text []string
	if len(pf.Sysctls) > 0 {
		pf.YAML = podYAML(pf.Sysctls)
		text = append(text, fmt.Sprintf("pod %s: set %s in the pod spec's securityContext.sysctls (YAML below; the pod is recreated to apply it), not with sysctl -w on the host, which does not reach the pod's network namespace", pod, names(pf.Sysctls)))
		for _, s := range pf.Sysctls {
			if s.Safe {
				text = append(text, fmt.Sprintf("%s is safe in Kubernetes since %s: the kubelet allows it by default", s.Name, s.SafeSince))
			}
		}
		if len(unsafe) > 0 {
			pf.Kubelet = "--allowed-unsafe-sysctls=" + strings.Join(unsafe, ",")
			text = append(text, fmt.Sprintf("%s %s unsafe in Kubernetes: every node that may run the pod needs kubelet %s (allowedUnsafeSysctls in its config file), else the pod is not started (SysctlForbidden)",
				strings.Join(unsafe, ", "), isAre(len(unsafe)), pf.Kubelet))
		}
	}
	if len(node) > 0 {
		rest = append(rest, Render("", node, "")+"  (on the node; persist in /etc/sysctl.d/)")
		text = append(text, fmt.Sprintf("%s %s not per network namespace: set on the node, it applies to every pod there", strings.Join(pf.Node, ", "), isAre(len(node))))
	}
	f.Command = strings.Join(rest, "; ")
	f.Text += "; " + strings.Join(text, "; ")
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func names(ss []diag.PodSysctl) string {
	n := make([]string, len(ss))
	for i, s := range ss {
		n[i] = s.Name
	}
	return strings.Join(n, ", ")
}

// podYAML is the pod spec fragment setting ss, each line commented with
// whether the kubelet allows it by default.
func podYAML(ss []diag.PodSysctl) string {
	var b strings.Builder
	b.WriteString("spec:\n  securityContext:\n    sysctls:\n")
	for _, s := range ss {
		note := "unsafe: needs kubelet --allowed-unsafe-sysctls"
		if s.Safe {
			note = "safe since Kubernetes " + s.SafeSince
		}
		fmt.Fprintf(&b, "    - name: %s  # %s\n      value: %s\n", s.Name, note, strconv.Quote(s.Value))
	}
	return b.String()
}

// PerNetns says whether a sysctl is set per network namespace on Linux
// 4.15 and later (when tcp_rmem and tcp_wmem became so): every net.*
// sysctl but the node-wide ones below. The rest (fs.file-max, vm.*) are
// not network settings at all. TestPerNetnsKernel checks this against the
// running kernel: a per-namespace sysctl is writable in a new namespace,
// a node-wide one absent there or read-only.
func PerNetns(name string) bool {
	if !strings.HasPrefix(name, "net.") {
		return false
	}
	switch name {
	case "net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default",
		"net.core.netdev_max_backlog", "net.core.netdev_budget", "net.core.netdev_budget_usecs", "net.core.dev_weight",
		"net.ipv4.tcp_mem", "net.ipv4.udp_mem":
		return false
	}
	return true
}

// KubeSafeSince is the Kubernetes version from which the kubelet allows
// a pod to set name without --allowed-unsafe-sysctls (its safe set), ""
// for an unsafe one. Kubernetes' "Using sysctls in a Kubernetes Cluster"
// lists them; the first three were safe from the start of pod sysctls,
// set in securityContext.sysctls since 1.11.
func KubeSafeSince(name string) string {
	switch name {
	case "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies":
		return "1.11"
	case "net.ipv4.ping_group_range":
		return "1.18"
	case "net.ipv4.ip_unprivileged_port_start":
		return "1.22"
	case "net.ipv4.ip_local_reserved_ports":
		return "1.27"
	case "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes":
		return "1.29"
	case "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem":
		return "1.32"
	}
	return ""
}

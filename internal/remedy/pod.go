package remedy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// InPods restates the fixes of findings whose subject is in a Kubernetes
// pod (Subject.Pod, named by the engine) in the pod's terms: a namespaced
// sysctl goes in the pod spec's securityContext.sysctls (a host sysctl -w
// does not reach the pod's network namespace), saying whether the
// kubelet allows it by default; a sysctl that is not per network
// namespace is set on the node, for every pod there; an application
// setting goes in the pod's container. ns is the namespace the findings
// were made in. Rules stay pod-agnostic: this is the one place fixes
// learn of pods (docs/containers.md, "Fixes in a pod").
func InPods(fs []diag.Finding, ns *snapshot.Netns) {
	for i := range fs {
		sub := &fs[i].Subject
		if sub.Pod == "" {
			continue
		}
		pod := sub.Pod
		if sub.PodNamespace != "" {
			pod = sub.PodNamespace + "/" + pod
		}
		// A pod with hostNetwork: true runs in the node's namespace, which
		// its own sandbox does not hold.
		hostNet := ns == nil || ns.Workload.PodName() != pod
		for j := range fs[i].Fixes {
			inPod(&fs[i].Fixes[j], pod, sub.Container, hostNet)
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
	sets, rest := splitSysctls(f.Command)
	if len(sets) == 0 {
		return
	}
	pf := &diag.PodFix{Pod: pod, Container: container}
	f.Pod = pf
	if hostNet {
		pf.HostNetwork = true
		f.Text += fmt.Sprintf(" (pod %s does not hold this network namespace (hostNetwork): no net.* sysctl can be set in its spec; the command sets the node's, for every pod on the node's network)", pod)
		return
	}
	var node []sysctlSet
	var unsafe []string
	for _, s := range sets {
		if !PerNetns(s.name) {
			node = append(node, s)
			pf.Node = append(pf.Node, s.name+"="+s.value)
			continue
		}
		since := KubeSafeSince(s.name)
		pf.Sysctls = append(pf.Sysctls, diag.PodSysctl{Name: s.name, Value: s.value, Safe: since != "", SafeSince: since})
		if since == "" {
			unsafe = append(unsafe, s.name)
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
		var b strings.Builder
		b.WriteString("sysctl -w")
		for _, s := range node {
			fmt.Fprintf(&b, " %s=%s", s.name, shellWord(s.value))
		}
		b.WriteString("  (on the node; persist in /etc/sysctl.d/)")
		rest = append(rest, b.String())
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

// shellWord quotes v for a shell when it holds a space.
func shellWord(v string) string {
	if strings.ContainsAny(v, " \t") {
		return "'" + v + "'"
	}
	return v
}

// sysctlSet is one name=value a command sets.
type sysctlSet struct{ name, value string }

// splitSysctls finds the settings of every "sysctl -w name=value..." in
// a fix's command (values unquoted, in order) and returns the command's
// other parts, without those and without the "echo ... >
// /etc/sysctl.d/..." that persist them. Parts are separated by ";" or
// "&&" outside quotes. A name or value of a shape no sysctl has (only our
// own commands are read) makes the command be left whole: no sets.
func splitSysctls(cmd string) (sets []sysctlSet, rest []string) {
	for _, part := range commandParts(cmd) {
		w := part.words
		switch {
		case len(w) > 0 && w[0] == "sysctl":
			write := false
			for _, a := range w[1:] {
				if a == "-w" {
					write = true
					continue
				}
				name, value, ok := strings.Cut(a, "=")
				if !ok {
					break // "(persist in /etc/sysctl.d/)" and the like
				}
				if !write || !sysctlName(name) || !sysctlValue(value) {
					return nil, nil
				}
				sets = append(sets, sysctlSet{name, value})
			}
		case len(w) > 0 && w[0] == "echo" && strings.Contains(part.raw, "/etc/sysctl.d/"):
		default:
			if r := strings.TrimSpace(part.raw); r != "" {
				rest = append(rest, r)
			}
		}
	}
	return sets, rest
}

// commandPart is one command of a list: its text and its words.
type commandPart struct {
	raw   string
	words []string
}

// commandParts splits cmd at ";" and "&&" outside quotes, and each part
// into words with their quotes removed.
func commandParts(cmd string) []commandPart {
	var parts []commandPart
	var cur commandPart
	var word strings.Builder
	inWord, quote, start := false, byte(0), 0
	endWord := func() {
		if inWord {
			cur.words = append(cur.words, word.String())
		}
		word.Reset()
		inWord = false
	}
	endPart := func(end int) {
		endWord()
		cur.raw = cmd[start:end]
		parts = append(parts, cur)
		cur = commandPart{}
	}
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				word.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			endWord()
		case c == ';':
			endPart(i)
			start = i + 1
		case c == '&' && i+1 < len(cmd) && cmd[i+1] == '&':
			endPart(i)
			i++
			start = i + 1
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endPart(len(cmd))
	return parts
}

func sysctlName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func sysctlValue(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ' ' || c == ',' || c == '-' || c == '_') {
			return false
		}
	}
	return true
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

// SPDX-License-Identifier: Apache-2.0

package output

import (
	"strconv"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// Subject is what a printed line is about: its network namespace and its
// process. Every printer formats these through Subject's methods, each
// in the form its output has always had, so a part added to the subject
// (a pod, a container) is added here once and reaches every printer.
// Text methods escape (textsafe); AppendJSON writes the raw strings.
type Subject struct {
	// Netns is the namespace's name as printed ("host", an `ip netns`
	// name, "pid:N", or NetnsLabel's "ns:INODE").
	Netns string
	// Pid is the process; HasPid false when there is none or it is
	// unknown.
	Pid    int
	HasPid bool
	// Command is the process's name; HasCommand false when it is unknown.
	Command    string
	HasCommand bool
	// Workload is the pod, container or unit of the process, else of
	// the namespace; nil when neither is known.
	Workload *snapshot.Workload
}

// SocketSubject is a socket's subject: its namespace and its owner
// (snapshot.Snapshot.Owner's rule, for a socket streamed apart from its
// snapshot), whose command and workload come from procs when known.
func SocketSubject(ns *snapshot.Netns, sk *snapshot.Socket, procs map[int]*snapshot.Proc) Subject {
	pid := sk.Pids.First()
	s := Subject{Netns: ns.Name, Pid: pid, HasPid: pid != 0, Workload: snapshot.WorkloadIn(ns, procs, pid)}
	if p := procs[pid]; pid != 0 && p != nil {
		s.Command, s.HasCommand = p.Command, true
	}
	return s
}

// ProcessSubject is the subject of what a process did in a namespace: no
// process when pid is 0 (the kernel acted for none).
func ProcessSubject(netns string, pid int, command string) Subject {
	return Subject{Netns: netns, Pid: pid, HasPid: pid != 0, Command: command, HasCommand: pid != 0}
}

// NetnsLabel names a namespace known by its inode: its name when named,
// else "ns:INODE", or "?" for inode 0 (not given).
func NetnsLabel(inode uint64, name string, named bool) string {
	switch {
	case named:
		return name
	case inode == 0:
		return "?"
	}
	return "ns:" + strconv.FormatUint(inode, 10)
}

// NetnsText is the namespace, escaped.
func (s *Subject) NetnsText() string { return textsafe.String(s.Netns) }

// AppendProcess appends the process as tables and lines show it:
// "command/pid", "?/pid" when the command is unknown, "-" for none.
func (s *Subject) AppendProcess(b []byte) []byte {
	if !s.HasPid {
		return append(b, '-')
	}
	if s.HasCommand {
		b = append(b, textsafe.String(s.Command)...)
	} else {
		b = append(b, '?')
	}
	b = append(b, '/')
	return strconv.AppendInt(b, int64(s.Pid), 10)
}

// ProcessPid is the process as a finding names it, "(command pid N)", or
// "" when it has neither.
func (s *Subject) ProcessPid() string {
	if !s.HasPid && !s.HasCommand {
		return ""
	}
	return "(" + textsafe.String(s.Command) + " pid " + strconv.Itoa(s.Pid) + ")"
}

// PidText is the pid alone, "-" for none (a column of its own).
func (s *Subject) PidText() string {
	if !s.HasPid {
		return "-"
	}
	return strconv.Itoa(s.Pid)
}

// CommandText is the command alone, escaped (a column of its own).
func (s *Subject) CommandText() string { return textsafe.String(s.Command) }

// AppendWorkload appends the workload as a column shows it, escaped:
// "shop/web-1 api", "web", "nginx.service", "-" for none.
func (s *Subject) AppendWorkload(b []byte) []byte {
	if l := s.Workload.Label(); l != "" {
		return append(b, textsafe.String(l)...)
	}
	return append(b, '-')
}

// WorkloadPhrase is the workload as a finding's line names it, escaped:
// "pod shop/web-1 container api", "container web", "unit nginx.service",
// or "" for none. A container that names the namespace (outside a pod)
// is said once, by NetnsPhrase.
func (s *Subject) WorkloadPhrase() string { return s.workloadPhrase(false) }

// WorkloadBesideNetns is WorkloadPhrase for a line that shows the
// namespace's name itself (watch's column, trace's header): without the
// pod or container that name already is.
func (s *Subject) WorkloadBesideNetns() string { return s.workloadPhrase(true) }

func (s *Subject) workloadPhrase(besideNetns bool) string {
	w := s.Workload
	var parts []string
	if p := w.PodName(); p != "" && !(besideNetns && p == s.Netns) {
		parts = append(parts, "pod "+textsafe.String(p))
	}
	if c := w.ContainerName(); c != "" && (w.Pod != "" || c != s.Netns) {
		parts = append(parts, "container "+textsafe.String(c))
	}
	if w != nil && w.Unit != "" && !w.IsContainer() {
		parts = append(parts, "unit "+textsafe.String(w.Unit))
	}
	return strings.Join(parts, " ")
}

// NetnsPhrase is the namespace as a finding's line names it, "netns
// NAME", or "" when the namespace is named by the subject's pod or
// container, which WorkloadPhrase says.
func (s *Subject) NetnsPhrase() string {
	if w := s.Workload; s.Netns != "" && w != nil && (w.PodName() == s.Netns || w.Pod == "" && w.ContainerName() == s.Netns) {
		return ""
	}
	return "netns " + s.NetnsText()
}

// AppendJSON appends the subject's members of a JSON object, raw strings
// JSON-escaped: "netns", then "pid" and "command", each null when unknown.
func (s *Subject) AppendJSON(b []byte) []byte {
	b = append(b, `"netns":`...)
	b = snapshot.AppendJSONString(b, s.Netns)
	b = append(b, `,"pid":`...)
	if s.HasPid {
		b = strconv.AppendInt(b, int64(s.Pid), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"command":`...)
	if s.HasCommand {
		b = snapshot.AppendJSONString(b, s.Command)
	} else {
		b = append(b, "null"...)
	}
	return s.AppendWorkloadJSON(b)
}

// AppendWorkloadJSON appends the workload's members, each only when
// known: "pod", "pod_namespace", "container", "unit" (as check's subject
// has them).
func (s *Subject) AppendWorkloadJSON(b []byte) []byte {
	if s.Workload == nil {
		return b
	}
	n := s.Workload.Names()
	for _, f := range [...]struct{ k, v string }{
		{`,"pod":`, n.Pod}, {`,"pod_namespace":`, n.PodNamespace},
		{`,"container":`, n.Container}, {`,"unit":`, n.Unit},
	} {
		if f.v != "" {
			b = append(b, f.k...)
			b = snapshot.AppendJSONString(b, f.v)
		}
	}
	return b
}

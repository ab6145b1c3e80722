// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"strconv"
	"strings"
)

// Counter returns a /proc/net counter such as "TcpExt.ListenOverflows".
func (s *Snapshot) Counter(name string) (int64, bool) {
	v, ok := s.Counters[name]
	return v, ok
}

// SysctlInts returns the whitespace-separated integers of a sysctl, e.g.
// tcp_wmem's three values. ok is false if absent or not all integers.
func (s *Snapshot) SysctlInts(name string) ([]int64, bool) {
	raw, ok := s.Sysctls[name]
	if !ok {
		return nil, false
	}
	f := strings.Fields(raw)
	if len(f) == 0 {
		return nil, false
	}
	out := make([]int64, len(f))
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// SysctlInt returns a single-integer sysctl.
func (s *Snapshot) SysctlInt(name string) (int64, bool) {
	v, ok := s.SysctlInts(name)
	if !ok || len(v) != 1 {
		return 0, false
	}
	return v[0], true
}

// Failed reports whether the named source recorded an error, and which.
func (s *Snapshot) Failed(source string) (string, bool) {
	for _, e := range s.Errors {
		if e.Source == source {
			return e.Err, true
		}
	}
	return "", false
}

// AddError records a failed source.
func (s *Snapshot) AddError(source string, err error) {
	s.Errors = append(s.Errors, SourceError{Source: source, Err: err.Error()})
}

// Source names used in Errors and Sources.
const (
	SourceSockdiag = "sockdiag"
	SourceNetstat  = "procnet.netstat"
	SourceSNMP     = "procnet.snmp"
	SourceSockstat = "procnet.sockstat"
	SourceSysctl   = "sysctl"
	SourceOwners   = "procs.owners"
	SourceNetns    = "netns"
	SourceBufLock  = "procs.buflock"
	SourceBPF      = "bpf"
	// SourceSockLocks is the eBPF iter/tcp walk for the lock bits.
	SourceSockLocks = "bpf.socklocks"
	// SourceFileOwners is the eBPF iter/task_file walk that finds socket
	// owners in place of /proc/PID/fd (procs.owners then names the walk
	// as a whole).
	SourceFileOwners = "bpf.fileowners"
	// SourceFlowOwners is the collector's second look for the openers of
	// connections too short for the owner scan (snapshot.FlowOwners).
	SourceFlowOwners = "procs.flowowners"
	// SourceContainers names the container, pod or unit of namespaces
	// and processes (internal/containers).
	SourceContainers = "containers"
	// SourceAppCaps is the read of the listening servers' own
	// configuration for their connection limits (snapshot.AppCaps).
	SourceAppCaps = "appcaps"
)

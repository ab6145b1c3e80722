// SPDX-License-Identifier: Apache-2.0

// Package snapshot is tcpdoctor's data model: one picture of one network
// namespace's TCP state at one instant. Sources fill it; rules read it.
package snapshot

import (
	"net/netip"
	"time"
)

// Snapshot is everything collected from one network namespace at one time.
// Absent data is absent (nil pointer, missing map key), never zero.
type Snapshot struct {
	Taken  time.Time `json:"taken"`
	Host   string    `json:"host,omitempty"`
	Kernel string    `json:"kernel,omitempty"`
	Netns  Netns     `json:"netns"`

	Sockets []Socket `json:"sockets"`
	// Was is what a window keeps of each of Sockets, in their order, when
	// the collector made it during the dump (collect.Options.Was): a
	// window's base then need not walk a million sockets again between
	// its samples. Nil otherwise; never written to a file. Code that
	// changes Sockets after the dump must set it to nil.
	Was []Was `json:"-"`
	// Counters holds every /proc/net/netstat and /proc/net/snmp value,
	// keyed "Group.Name", e.g. "TcpExt.ListenOverflows", "Tcp.ActiveOpens".
	Counters map[string]int64 `json:"counters,omitempty"`
	// Sockstat holds /proc/net/sockstat and sockstat6, keyed "PROTO.field",
	// e.g. "TCP.tw", "TCP6.inuse", "sockets.used".
	Sockstat map[string]int64 `json:"sockstat,omitempty"`
	// Sysctls holds raw values (whitespace folded to one space) keyed by
	// dotted name, e.g. "net.core.somaxconn". A setting the kernel lacks
	// has no key.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Procs holds the processes that own at least one socket, by pid.
	Procs map[int]*Proc `json:"procs,omitempty"`
	// FlowOwners names the processes behind connections too short to be
	// matched by the owner scan: found by a second look at the processes
	// opening sockets at the time of the scan.
	FlowOwners []FlowOwner `json:"flow_owners,omitempty"`
	// Events holds the eBPF connection events since the previous
	// snapshot; nil when that source was off or failed.
	Events *Events `json:"bpf,omitempty"`
	// BufLocks says where the sockets' BufLock bits came from, or why
	// they are absent; nil in files recorded before it existed.
	BufLocks *BufLockOrigin `json:"buf_locks,omitempty"`
	// AppCaps holds the connection limits the servers owning listeners
	// set for themselves, read from their own configuration
	// (internal/appcaps); nil when that source did not run.
	AppCaps []AppCap `json:"app_caps,omitempty"`

	// Errors lists every source that failed or was partial; collection
	// carries on past them.
	Errors []SourceError `json:"errors,omitempty"`
	// Sources lists every source attempted, with timing.
	Sources []SourceStat `json:"sources,omitempty"`
}

// Where BufLock bits come from (BufLockOrigin.From).
const (
	// LocksIter: the eBPF iter/tcp iterator read sk_userlocks of every
	// full socket without touching any.
	LocksIter = "iter/tcp"
	// LocksPidfd: getsockopt(SO_BUF_LOCK) on a copy of an owner's fd
	// (pidfd_getfd), for owned sockets that looked pinned; opt-in.
	LocksPidfd = "pidfd_getfd"
)

// BufLockOrigin is where a snapshot's SO_BUF_LOCK bits came from.
type BufLockOrigin struct {
	// From is LocksIter or LocksPidfd; empty when the bits were not read.
	From string `json:"from,omitempty"`
	// Why says why they were not read (or only partly), for people.
	Why string `json:"why,omitempty"`
}

// What an AppCap counts (AppCap.Per).
const (
	// CapPerProcess: each process of AppCap.Pids holds at most Value
	// connections of every kind, its listeners and its own outgoing
	// connections included (nginx worker_connections).
	CapPerProcess = "process"
	// CapPerListener: the connections accepted on the listeners of
	// AppCap.Pid, whichever process holds them, are at most Value
	// (Redis maxclients, PostgreSQL max_connections).
	CapPerListener = "listener"
)

// AppCap is a connection limit a server sets for itself, as its own
// configuration says, with where each value came from.
type AppCap struct {
	// Pid is the process whose configuration it is (nginx's master, the
	// PostgreSQL postmaster) and Command its name.
	Pid     int    `json:"pid"`
	Command string `json:"command"`
	// App names the server software: nginx, redis, postgresql.
	App string `json:"app"`
	// Setting is the limit's name in the configuration and Value its
	// effective value.
	Setting string `json:"setting"`
	Value   int64  `json:"value"`
	// Reserved is the part of Value ordinary clients cannot have
	// (PostgreSQL's superuser_reserved_connections): they are turned
	// away at Value - Reserved.
	Reserved int64 `json:"reserved,omitempty"`
	// Source is where Value came from: "FILE:LINE", "command line" or
	// "default (no setting in FILE)"; FILE as the process sees it.
	Source string `json:"source"`
	// Per is CapPerProcess or CapPerListener.
	Per string `json:"per"`
	// Pids are the processes each held to Value (nginx's workers) for
	// CapPerProcess.
	Pids []int `json:"pids,omitempty"`
	// Ports, when set, are the ports of the listeners of Pid the limit
	// covers (a haproxy frontend's binds); empty: all of them.
	Ports []uint16 `json:"ports,omitempty"`
	// Related are other settings the fix names (worker_processes,
	// worker_rlimit_nofile, reserved connections), each with its source.
	Related []AppSetting `json:"related,omitempty"`
}

// AppSetting is one configuration value and where it came from.
type AppSetting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// RelatedValue returns the related setting name, if read.
func (c *AppCap) RelatedValue(name string) (AppSetting, bool) {
	for _, r := range c.Related {
		if r.Name == name {
			return r, true
		}
	}
	return AppSetting{}, false
}

// FlowOwner is a process seen holding a connection from Local to Remote.
type FlowOwner struct {
	Local  netip.Addr     `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	Pid    int            `json:"pid"`
	// Sockets counts the connections matched to the process.
	Sockets int `json:"sockets"`
}

// Netns identifies a network namespace.
type Netns struct {
	// Name is the `ip netns` name, "host" for the collector's own
	// namespace when not named, the pod ("shop/web-1"), container or unit
	// holding it (Workload), or "pid:N" for one found via a process.
	Name  string `json:"name"`
	Inode uint64 `json:"inode,omitempty"`
	// Workload is the pod, container or unit holding the namespace; nil
	// when none was found or resolution was off.
	Workload *Workload `json:"workload,omitempty"`
}

// SourceError records a source that failed or was incomplete.
type SourceError struct {
	Source string `json:"source"`
	Err    string `json:"error"`
}

// SourceStat records one source's outcome and cost.
type SourceStat struct {
	Source   string        `json:"source"`
	OK       bool          `json:"ok"`
	Duration time.Duration `json:"duration_ns"`
}

// Socket is one TCP socket as sock_diag reports it, plus its owners.
// Its fields are ordered so that it packs into 120 bytes, a million of
// them held at once by check (TestSampleSizes); JSON keeps this order.
type Socket struct {
	Family uint8    `json:"family"` // 2 (AF_INET) or 10 (AF_INET6)
	State  State    `json:"state"`
	Local  Endpoint `json:"local"`
	Remote Endpoint `json:"remote"`
	Timer  uint8    `json:"timer,omitempty"`
	// Retrans is idiag_retrans: retransmits outstanding (or, for
	// listeners, unused).
	Retrans uint8 `json:"retrans,omitempty"`
	// Shutdown is the INET_DIAG_SHUTDOWN bits (1 rcv, 2 snd), if sent.
	Shutdown Flags `json:"shutdown,omitzero"`
	// BufLock is the socket's SO_BUF_LOCK bits (sk_userlocks & 3: bit 0
	// SNDBUF, bit 1 RCVBUF set by the application); unknown when not
	// read. Snapshot.BufLocks says how they were read.
	BufLock Flags  `json:"buf_lock,omitzero"`
	RecvQ   uint32 `json:"recv_q"`
	SendQ   uint32 `json:"send_q"`
	UID     uint32 `json:"uid"`
	Inode   uint32 `json:"inode"`
	Cookie  uint64 `json:"cookie"`
	IfIndex uint32 `json:"ifindex,omitempty"`
	Expires uint32 `json:"expires_ms,omitempty"`
	CC      CC     `json:"cc,omitzero"`
	// Info holds the tcp_info, packed once a Store kept the socket: read
	// it with TCP, set it with TCPOf.
	Info TCPRef   `json:"tcp_info"`
	Mem  *MemInfo `json:"mem"`
	// Pids owning this socket (sharing its file); none when unknown.
	Pids PidList `json:"pids,omitzero"`
}

// MemInfo is INET_DIAG_SKMEMINFO (SK_MEMINFO_*), in bytes.
type MemInfo struct {
	RmemAlloc  uint32 `json:"rmem_alloc"`
	Rcvbuf     uint32 `json:"rcvbuf"`
	WmemAlloc  uint32 `json:"wmem_alloc"`
	Sndbuf     uint32 `json:"sndbuf"`
	FwdAlloc   uint32 `json:"fwd_alloc"`
	WmemQueued uint32 `json:"wmem_queued"`
	Optmem     uint32 `json:"optmem"`
	Backlog    uint32 `json:"backlog"`
	Drops      uint32 `json:"drops"`
}

// Proc is one process that owns sockets.
type Proc struct {
	Pid     int    `json:"pid"`
	Command string `json:"command"`
	// FDs is the number of open file descriptors; -1 when unknown.
	FDs int `json:"fds"`
	// NofileSoft/Hard are RLIMIT_NOFILE; -1 means unlimited, nil unknown.
	NofileSoft *int64 `json:"nofile_soft,omitempty"`
	NofileHard *int64 `json:"nofile_hard,omitempty"`
	// Workload is the container, pod or systemd unit the process runs
	// in; nil when none was found or resolution was off.
	Workload *Workload `json:"workload,omitempty"`
}

// State is a TCP state as numbered by the kernel (include/net/tcp_states.h).
type State uint8

// The states, in the kernel's order.
const (
	Established State = 1 + iota
	SynSent
	SynRecv
	FinWait1
	FinWait2
	TimeWait
	Close
	CloseWait
	LastAck
	Listen
	Closing
	NewSynRecv
	BoundInactive
)

var stateNames = [...]string{
	Established: "ESTAB", SynSent: "SYN-SENT", SynRecv: "SYN-RECV",
	FinWait1: "FIN-WAIT-1", FinWait2: "FIN-WAIT-2", TimeWait: "TIME-WAIT",
	Close: "CLOSE", CloseWait: "CLOSE-WAIT", LastAck: "LAST-ACK",
	Listen: "LISTEN", Closing: "CLOSING", NewSynRecv: "NEW-SYN-RECV",
	BoundInactive: "BOUND-INACTIVE",
}

// String returns the ss-style name.
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "UNKNOWN"
}

// ParseState accepts ss-style names, case-insensitively, with '-' or '_'.
func ParseState(name string) (State, bool) {
	n := normState(name)
	for i, s := range stateNames {
		if s != "" && normState(s) == n {
			return State(i), true
		}
	}
	switch n {
	case "established":
		return Established, true
	case "synrecv", "synreceived":
		return SynRecv, true
	}
	return 0, false
}

func normState(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' {
			continue
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

// MarshalText makes states readable in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a state name.
func (s *State) UnmarshalText(b []byte) error {
	v, ok := ParseState(string(b))
	if !ok {
		return &UnknownStateError{Name: string(b)}
	}
	*s = v
	return nil
}

// UnknownStateError is returned for a state name tcpdoctor does not know.
type UnknownStateError struct{ Name string }

func (e *UnknownStateError) Error() string { return "snapshot: unknown tcp state " + quote(e.Name) }

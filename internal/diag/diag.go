// SPDX-License-Identifier: Apache-2.0

// Package diag holds the diagnosis model: rules, findings and the engine
// that runs rules over snapshots.
package diag

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Severity orders findings.
type Severity int

// The severities, least first.
const (
	Info Severity = 1 + iota
	Warning
	Critical
)

var sevNames = map[Severity][2]string{
	Info: {"info", "INFO"}, Warning: {"warning", "WARN"}, Critical: {"critical", "CRIT"},
}

// String is the JSON name: info, warning, critical.
func (s Severity) String() string { return sevNames[s][0] }

// Label is the short upper-case label for text output.
func (s Severity) Label() string { return sevNames[s][1] }

// MarshalText writes the JSON name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads info, warning or critical.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	*s = v
	return err
}

// ParseSeverity reads info, warning or critical (also warn, crit).
func ParseSeverity(name string) (Severity, error) {
	switch name {
	case "info":
		return Info, nil
	case "warning", "warn":
		return Warning, nil
	case "critical", "crit":
		return Critical, nil
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warning or critical)", name)
}

// Count is a number of sockets for one key (an address or a port).
type Count struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// Evidence is one value behind a finding: what, how much, from where, and
// the threshold it crossed.
type Evidence struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Source    string `json:"source"`
	Threshold string `json:"threshold,omitempty"`
}

// Fix is one remedy with its values worked out.
type Fix struct {
	// Scope is "application" or "kernel".
	Scope string `json:"scope"`
	// Target names what to change: "netty", "nginx", "java", "go", "sysctl"...
	Target string `json:"target,omitempty"`
	Text   string `json:"text"`
	// Command is the exact command or setting, with computed values; a
	// fix that sets sysctls has them rendered here from Sysctls
	// (remedy.SetSysctls).
	Command string `json:"command,omitempty"`
	// Sysctls are the kernel settings the fix makes, as data, in the
	// order Command sets them.
	Sysctls []Sysctl `json:"sysctls,omitempty"`
	// Pre is the part of Command run before the sysctls (a probe, as
	// "ping -M do ..."), and Persist the /etc/sysctl.d file Command also
	// writes them to: both in Command already, kept apart for the
	// restatements that render the sysctls another way (remedy.InPods).
	Pre     string `json:"-"`
	Persist string `json:"-"`
	Risk    string `json:"risk,omitempty"`
	// Peer is set on a fix made at the connection's other end (a
	// receiver the subject sends to), not by the subject's process nor in
	// its network namespace.
	Peer bool `json:"peer,omitempty"`
	// Pod says where the fix goes when the finding's subject is in a
	// Kubernetes pod; set after the engine names the subject
	// (remedy.InPods), never by a rule.
	Pod *PodFix `json:"pod,omitempty"`
}

// How a Sysctl limits (Sysctl.Limit).
const (
	// LimitRaise: a capacity limit (a buffer maximum, a queue length, a
	// file count): a fix only raises each of its values.
	LimitRaise = "raise"
	// LimitWiden: a range (ip_local_port_range): a fix only lowers its
	// low end and raises its high end.
	LimitWiden = "widen"
)

// Sysctl is one kernel setting a fix makes.
type Sysctl struct {
	Name string `json:"name"`
	// Value is what the fix sets, as sysctl -n prints it (the values of
	// a vector such as tcp_rmem separated by one space).
	Value string `json:"value"`
	// Limit is LimitRaise or LimitWiden for a capacity limit, empty for
	// a switch or a setting a fix may lower.
	Limit string `json:"limit,omitempty"`
	// Host is the value the host the fix is for had in the snapshot.
	// For a limit, Value is at least it, value by value (a range at least
	// as wide); a limit without it (a peer's host) is set only where the
	// host's own value is lower, by a guard in the command.
	Host string `json:"host,omitempty"`
}

// Guarded says the command sets s only where the host's value is lower:
// a limit whose host value is not known.
func (s Sysctl) Guarded() bool { return s.Limit != "" && s.Host == "" }

// PodFix is a fix restated for a subject in a Kubernetes pod: its
// namespaced sysctls go in the pod spec, the others on the node, its
// application settings in the pod's container.
type PodFix struct {
	// Pod is "namespace/name"; Container the pod's container the
	// application runs in, when known.
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"`
	// Sysctls are the fix's sysctls that are per network namespace, set
	// for the pod in its spec's securityContext.sysctls (YAML).
	Sysctls []PodSysctl `json:"sysctls,omitempty"`
	// YAML is the pod spec fragment that sets Sysctls.
	YAML string `json:"yaml,omitempty"`
	// Kubelet is the kubelet flag every node that may run the pod needs
	// before it starts a pod with the unsafe ones among Sysctls.
	Kubelet string `json:"kubelet,omitempty"`
	// Node lists the fix's sysctls ("name=value") that are not per
	// network namespace: set on the node, they apply to every pod there.
	Node []string `json:"node,omitempty"`
	// HostNetwork is set when the pod does not hold the network namespace
	// the finding is in (hostNetwork: true): no net.* sysctl can be set
	// for it, and the fix's command sets the node's.
	HostNetwork bool `json:"host_network,omitempty"`
}

// PodSysctl is one sysctl of a fix set in a pod spec.
type PodSysctl struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Safe says the kubelet allows it by default, from Kubernetes
	// SafeSince on; an unsafe one needs PodFix.Kubelet on the node.
	Safe      bool   `json:"safe"`
	SafeSince string `json:"safe_since,omitempty"`
}

// Finding is one diagnosis.
type Finding struct {
	Rule     string     `json:"rule"`
	Severity Severity   `json:"severity"`
	Subject  Subject    `json:"subject"`
	Summary  string     `json:"summary"`
	Evidence []Evidence `json:"evidence"`
	Fixes    []Fix      `json:"fixes"`
}

// Options are user inputs some rules use.
type Options struct {
	// Bandwidth is the path rate in bits per second given by --bandwidth;
	// 0 means unknown (rules estimate from delivery rate).
	Bandwidth float64
}

// Input is what a rule sees: the current snapshot of one netns and,
// when the window is non-zero, the one before it as a Base.
type Input struct {
	// Prev is the previous sample but for its established connections,
	// which PrevOf finds by cookie and KeptOf tallies (Base); nil for a
	// single snapshot.
	Prev    *snapshot.Snapshot
	Cur     *snapshot.Snapshot
	Options Options
	base    *Base
	// prev finds Cur's sockets in the base, built by NewInput's
	// goroutine; prevReady is closed when it is, and prevDone set once a
	// caller has seen it closed: receiving from a closed channel takes
	// its lock, which a million calls from every CPU contended for.
	prev      *prevIndex
	prevReady chan struct{}
	prevDone  atomic.Bool
	tuples    tcpmodel.Tuples // CurTuples: indexed at its first lookup
	// Host finds connections' other ends in the other namespaces of the
	// same collection (HostPeer); nil when Cur was collected alone.
	Host *tcpmodel.HostPeers
	// memos holds MemoOf's values by key.
	memos onceMap
}

// NewInput builds an Input from two whole samples (prev nil for one),
// as NewInputFrom with prev as its Base; what the rules keep of prev
// (KeptOf) is computed from it when they ask.
func NewInput(prev, cur *snapshot.Snapshot, opts Options) *Input {
	var b *Base
	if prev != nil {
		b = wholeBase(prev)
	}
	return NewInputFrom(b, cur, opts)
}

// NewInputFrom builds an Input and starts matching the current sockets to
// the base's (joinPrev) in a goroutine of its own, so that rules which do
// not look back start meanwhile.
func NewInputFrom(base *Base, cur *snapshot.Snapshot, opts Options) *Input {
	in := &Input{Cur: cur, Options: opts, base: base, prevReady: make(chan struct{}), tuples: tcpmodel.TuplesOf(cur)}
	if base == nil {
		close(in.prevReady)
		return in
	}
	in.Prev = base.Snap
	go func() {
		defer close(in.prevReady)
		in.prev = joinPrev(base.Was, cur.Sockets)
	}()
	return in
}

// Window is the time between the two snapshots, 0 without a previous one.
func (in *Input) Window() time.Duration {
	if in.Prev == nil {
		return 0
	}
	return in.Cur.Taken.Sub(in.Prev.Taken)
}

// PrevOf returns what the previous sample held of sk's connection (same
// cookie), nil when it was not there. sk is one of Cur's sockets, found
// by its position at no cost; any other socket is looked up by cookie.
func (in *Input) PrevOf(sk *snapshot.Socket) *snapshot.Was {
	if in.prevReady != nil && !in.prevDone.Load() { // nil in an Input not made by NewInput
		<-in.prevReady
		in.prevDone.Store(true)
	}
	if in.prev == nil {
		return nil
	}
	if i, ok := indexIn(in.Cur.Sockets, sk); ok {
		if j := in.prev.at[i]; j >= 0 {
			return &in.base.Was[j]
		}
		return nil
	}
	return in.prev.byCookie(in.base.Was, sk.Cookie)
}

// CurTuples indexes the current snapshot's connected sockets by (local,
// remote) for finding local peers: one index shared by every rule that
// asks, built at the first lookup (tcpmodel.Tuples).
func (in *Input) CurTuples() tcpmodel.Tuples {
	return in.tuples
}

// HostPeer is the other end of sk, a socket of Cur, and the snapshot
// holding it, when it lives in another namespace of the same collection
// (two pods on one node); nil, nil otherwise or without Host.
func (in *Input) HostPeer(sk *snapshot.Socket) (*snapshot.Snapshot, *snapshot.Socket) {
	return in.Host.Peer(in.Cur, sk)
}

// CounterDelta returns how much a counter moved over the window. ok is
// false without a previous snapshot or when either lacks the counter.
func (in *Input) CounterDelta(name string) (int64, bool) {
	if in.Prev == nil {
		return 0, false
	}
	a, ok1 := in.Prev.Counter(name)
	b, ok2 := in.Cur.Counter(name)
	if !ok1 || !ok2 {
		return 0, false
	}
	return b - a, true
}

// Rule is one diagnosis. Check must be a pure function of its input: no
// I/O and no clock. It returns an error (Unknownf) when its inputs are
// missing, so the engine reports "unknown" rather than healthy.
type Rule struct {
	ID         string
	Title      string
	NeedsDelta bool
	// Keeps lists what the rule reads of the window's first sample with
	// KeptOf: the window keeps that of it, not the sample whole.
	Keeps []Keeper
	// Traceable: the rule's findings are about how a connection's
	// transfers move, which a trace splits by what held them; serve
	// --history records a short trace of a warning's connections
	// (history.TraceOptions).
	Traceable bool
	Check     func(in *Input) ([]Finding, error)
}

// Unknown records a rule that could not run, with the reason.
type Unknown struct {
	Rule   string `json:"rule"`
	Netns  string `json:"netns,omitempty"`
	Reason string `json:"reason"`
}

// Unknownf builds the error a rule returns when it cannot decide.
func Unknownf(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}

// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Subject says what a finding is about, typed: its addresses as
// addresses and its pod, container or unit as the snapshot.Workload
// internal/containers found. Zero fields do not apply. JSON writes it as
// docs/json.md has it (the workload as its pod, pod_namespace, container
// and unit members); text comes from report.SubjectText, metric labels
// from the exporter's labelsOf, each from these fields.
type Subject struct {
	Netns  string
	Local  Address
	Remote Address
	// Service is the local listener that server-side sockets belong to.
	Service Address
	Pid     int
	Command string
	// Workload is the pod, container or unit of the subject's process,
	// else of its namespace, when known (Run fills it from the snapshot:
	// snapshot.WorkloadIn); never changed after.
	Workload *snapshot.Workload
	// Peers counts sockets per remote address, most first, when a finding
	// groups sockets; Ports counts them per local port.
	Peers []Count
	Ports []Count
	// Peer is the other end of the subject's connection when it lives on
	// this host in another network namespace of the same collection
	// (Input.HostPeer): the rules that judge a connection by its other
	// end (rwnd-limited, slow-reader, sndbuf-limited,
	// connection-bottleneck) name it.
	Peer *Peer
}

// subjectJSON is Subject as docs/json.md has it.
type subjectJSON struct {
	Netns   string  `json:"netns,omitempty"`
	Local   Address `json:"local,omitzero"`
	Remote  Address `json:"remote,omitzero"`
	Service Address `json:"service,omitzero"`
	Pid     int     `json:"pid,omitempty"`
	Command string  `json:"command,omitempty"`
	snapshot.Names
	Peers []Count `json:"peers,omitempty"`
	Ports []Count `json:"ports,omitempty"`
	Peer  *Peer   `json:"peer,omitempty"`
}

// MarshalJSON writes the subject's members of docs/json.md.
func (s Subject) MarshalJSON() ([]byte, error) {
	return json.Marshal(subjectJSON{Netns: s.Netns, Local: s.Local, Remote: s.Remote, Service: s.Service,
		Pid: s.Pid, Command: s.Command, Names: s.Workload.Names(), Peers: s.Peers, Ports: s.Ports, Peer: s.Peer})
}

// UnmarshalJSON reads what MarshalJSON writes; the workload is what the
// members name (its pod, namespace, container and unit).
func (s *Subject) UnmarshalJSON(b []byte) error {
	var j subjectJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Subject{Netns: j.Netns, Local: j.Local, Remote: j.Remote, Service: j.Service, Pid: j.Pid, Command: j.Command,
		Workload: j.Workload(), Peers: j.Peers, Ports: j.Ports, Peer: j.Peer}
	return nil
}

// Address is a subject's address: an address and port, or an address
// alone (a host's many connections, whose ports differ). The zero
// Address is none.
type Address struct {
	ap netip.AddrPort
	// host: the address alone, no port.
	host bool
}

// At is the address and port ap; none when ap is invalid.
func At(ap netip.AddrPort) Address {
	if !ap.IsValid() {
		return Address{}
	}
	return Address{ap: ap}
}

// Host is the address a alone; none when a is invalid.
func Host(a netip.Addr) Address {
	if !a.IsValid() {
		return Address{}
	}
	return Address{ap: netip.AddrPortFrom(a, 0), host: true}
}

// ParseAddress reads String's text: "1.2.3.4:80", "[::1]:80", an
// address alone, or "" for none.
func ParseAddress(s string) (Address, error) {
	if s == "" {
		return Address{}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return At(ap), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return Address{}, fmt.Errorf("diag: subject address %q: neither an address and port nor an address", s)
	}
	return Host(a), nil
}

// IsValid reports whether a is an address.
func (a Address) IsValid() bool { return a.ap.IsValid() }

// IsZero reports whether a is none (for omitzero).
func (a Address) IsZero() bool { return !a.IsValid() }

// Addr is the address; invalid for none.
func (a Address) Addr() netip.Addr { return a.ap.Addr() }

// AddrPort is the address and port; ok false for none or an address
// alone.
func (a Address) AddrPort() (ap netip.AddrPort, ok bool) {
	return a.ap, a.IsValid() && !a.host
}

// String is "1.2.3.4:80", "[::1]:80", "1.2.3.4" or "::1" for an address
// alone, "" for none.
func (a Address) String() string {
	switch {
	case !a.IsValid():
		return ""
	case a.host:
		return a.ap.Addr().String()
	}
	return a.ap.String()
}

// MarshalText writes String's text.
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads String's text.
func (a *Address) UnmarshalText(b []byte) error {
	v, err := ParseAddress(string(b))
	*a = v
	return err
}

// Peer is the other end of a connection on this host: its namespace,
// address, process and workload (the process's, else its namespace's).
type Peer struct {
	Netns    string
	Local    Address
	Pid      int
	Command  string
	Workload *snapshot.Workload
}

// peerJSON is Peer as docs/json.md has it.
type peerJSON struct {
	Netns        string  `json:"netns,omitempty"`
	Local        Address `json:"local,omitzero"`
	Pid          int     `json:"pid,omitempty"`
	Command      string  `json:"command,omitempty"`
	Pod          string  `json:"pod,omitempty"`
	PodNamespace string  `json:"pod_namespace,omitempty"`
	Container    string  `json:"container,omitempty"`
}

// MarshalJSON writes the peer's members of docs/json.md.
func (p Peer) MarshalJSON() ([]byte, error) {
	m := p.Workload.Names()
	return json.Marshal(peerJSON{Netns: p.Netns, Local: p.Local, Pid: p.Pid, Command: p.Command,
		Pod: m.Pod, PodNamespace: m.PodNamespace, Container: m.Container})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Peer) UnmarshalJSON(b []byte) error {
	var j peerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Peer{Netns: j.Netns, Local: j.Local, Pid: j.Pid, Command: j.Command,
		Workload: snapshot.Names{Pod: j.Pod, PodNamespace: j.PodNamespace, Container: j.Container}.Workload()}
	return nil
}

// PeerOf describes sk, a socket of s, as a Peer.
func PeerOf(s *snapshot.Snapshot, sk *snapshot.Socket) *Peer {
	p := &Peer{Netns: s.Netns.Name, Local: At(sk.Local.AddrPort()), Workload: s.WorkloadOf(sk)}
	var pr *snapshot.Proc
	p.Pid, pr = s.Owner(sk)
	if pr != nil {
		p.Command = pr.Command
	}
	return p
}

// String names the peer for people: "java (pid 812) in pod shop/web-1
// container api, netns cni-1234".
func (p *Peer) String() string {
	who := "unknown owner"
	if p.Pid != 0 {
		who = fmt.Sprintf("%s (pid %d)", p.Command, p.Pid)
	}
	c := p.Workload.ContainerName()
	if pod := p.Workload.PodName(); pod != "" {
		who += " in pod " + pod
		if c != "" {
			who += " container " + c
		}
	} else if c != "" {
		who += " in container " + c
	}
	return who + ", netns " + p.Netns
}

// MustParseAddress is ParseAddress for a constant: it panics on an
// error.
func MustParseAddress(s string) Address {
	a, err := ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

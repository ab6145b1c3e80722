// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

// SocketFilter is the sockets a listing keeps: by state, port and owning
// process (0: any). Apply has the kernel do the state and port tests, so
// rejected sockets are never copied out; Match still runs on what comes
// back, so the result is Match's either way.
type SocketFilter struct {
	States             map[snapshot.State]bool
	Port, LPort, RPort int
	Pid                int
}

// Match reports whether sk passes every test.
func (f *SocketFilter) Match(sk *snapshot.Socket) bool {
	if f.States != nil && !f.States[sk.State] {
		return false
	}
	if !f.Ports(int(sk.Local.Port()), int(sk.Remote.Port())) {
		return false
	}
	if f.Pid != 0 {
		found := false
		for _, p := range sk.Pids.List() {
			found = found || p == f.Pid
		}
		return found
	}
	return true
}

// Ports tests a local and a remote port against Port, LPort and RPort
// (sockets and the eBPF events alike).
func (f *SocketFilter) Ports(lp, rp int) bool {
	return (f.Port == 0 || lp == f.Port || rp == f.Port) &&
		(f.LPort == 0 || lp == f.LPort) && (f.RPort == 0 || rp == f.RPort)
}

// Apply sets o's dump request to do f's state and port tests in the
// kernel (idiag_states and INET_DIAG bytecode).
func (f *SocketFilter) Apply(o *Options) {
	o.States, o.Filter = f.kernel()
}

// kernel is the dump request of Apply. A state asks for the kernel's
// states that sock_diag reports as it, too.
func (f *SocketFilter) kernel() (states uint32, kf *sockdiag.Filter) {
	for st := range f.States {
		states |= 1 << st
		switch st {
		case snapshot.Close:
			// Sockets only bound come as CLOSE but answer to this bit.
			states |= 1 << snapshot.BoundInactive
		case snapshot.SynRecv:
			states |= 1 << snapshot.NewSynRecv
		}
	}
	kf = &sockdiag.Filter{}
	if f.Port != 0 {
		kf.Ports = []uint16{uint16(f.Port)}
	}
	if f.LPort != 0 {
		kf.LPorts = []uint16{uint16(f.LPort)}
	}
	if f.RPort != 0 {
		kf.RPorts = []uint16{uint16(f.RPort)}
	}
	if kf.Empty() {
		kf = nil
	}
	return states, kf
}

package diag

import (
	"net/netip"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// A base keeps every socket as a Was, only the ones not established
// whole, and tallies what rules compared with the whole sample.
func TestNewBase(t *testing.T) {
	ap := netip.MustParseAddrPort
	ln := snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: 1, Local: ap("198.18.0.1:80"), Pids: []int{10}}
	acc := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 2, Local: ap("198.18.0.1:80"), Remote: ap("198.18.0.2:40000"), Pids: []int{10}}
	cli := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 3, Local: ap("198.18.0.1:40001"), Remote: ap("198.18.0.3:443"), Pids: []int{20}, RecvQ: 7}
	tw := snapshot.Socket{Family: 2, State: snapshot.TimeWait, Cookie: 4, Local: ap("198.18.0.1:40002"), Remote: ap("198.18.0.3:443")}
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{ln, acc, cli, tw},
		Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "32768 60999"}}
	b := NewBase(s)
	if len(b.Was) != 4 || b.Was[2].Cookie != 3 || b.Was[2].RecvQ != 7 {
		t.Errorf("Was: %+v", b.Was)
	}
	if len(b.Snap.Sockets) != 2 || b.Snap.Sockets[0].Cookie != 1 || b.Snap.Sockets[1].Cookie != 4 {
		t.Errorf("whole sockets: %+v", b.Snap.Sockets)
	}
	if len(s.Sockets) != 4 {
		t.Errorf("NewBase changed its sample: %d sockets", len(s.Sockets))
	}
	in := NewInputFrom(b, &snapshot.Snapshot{Sockets: []snapshot.Socket{cli}}, Options{})
	if p := in.PrevOf(&in.Cur.Sockets[0]); p == nil || p.RecvQ != 7 || p.State != snapshot.Established {
		t.Errorf("PrevOf: %+v", p)
	}
	if got := in.PrevAccepted(1); got != 1 {
		t.Errorf("accepted on the listener: %d, want 1", got)
	}
	if got := in.PrevOpener(tcpmodel.FlowOf(cli.Local.Addr(), cli.Remote)); got != 20 {
		t.Errorf("opener of the client flow: %d, want 20", got)
	}
	if got := in.PrevOpener(tcpmodel.FlowOf(acc.Local.Addr(), acc.Remote)); got != 0 {
		t.Errorf("an accepted connection counted as opened by its server: %d", got)
	}
	held, ok := in.PrevHeld()
	if k := tcpmodel.DestOf(cli.Local.Addr(), cli.Remote); !ok || held[k] != 2 {
		t.Errorf("held: %v %v, want 2 to %v (one open, one in TIME_WAIT)", held, ok, k)
	}
	delete(s.Sysctls, "net.ipv4.ip_local_port_range")
	if _, ok := NewInput(s, s, Options{}).PrevHeld(); ok {
		t.Error("held known without the port range")
	}
}

// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func TestUnownedFlows(t *testing.T) {
	svc := netip.MustParseAddrPort("127.0.0.1:6379")
	lo := netip.MustParseAddr("127.0.0.1")
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{
		{State: snapshot.Listen, Local: snapshot.EndpointOf(svc)},
		{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8081"))},
		// An owned flow needs nothing.
		{State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:40002")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.9:443")), Pids: snapshot.PidsOf(7)},
	}}
	young := uint32(59_000) // TIME_WAIT for 1 s
	for i := 0; i < flowChurnTW; i++ {
		p := uint16(41000 + 4*i)
		s.Sockets = append(s.Sockets,
			// Client side closed first: a flow with no owner.
			snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, p)), Remote: snapshot.EndpointOf(svc), Expires: young},
			// Server side closed first towards another service port.
			snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8081")), Remote: snapshot.EndpointFrom(lo, p+1), Expires: young},
			snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointFrom(lo, p+2), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.9:443")), Expires: young},
			// Old TIME_WAIT: not churn now.
			snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointFrom(lo, p+3), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.7:443")), Expires: 10_000})
	}
	need := unownedFlows(s)
	if len(need) != 2 || !need[flowKey{lo, svc}] || !need[flowKey{lo, netip.MustParseAddrPort("127.0.0.1:8081")}] {
		t.Errorf("need %v", need)
	}
}

// TestFlowOwnersTooManySockets: in a namespace over flowMaxSockets the
// second look is not taken, and the snapshot says so (the churn rule
// then says why its opener is unnamed) in words every sample repeats.
func TestFlowOwnersTooManySockets(t *testing.T) {
	svc := netip.MustParseAddrPort("127.0.0.1:6379")
	lo := netip.MustParseAddr("127.0.0.1")
	s := &snapshot.Snapshot{Sockets: make([]snapshot.Socket, flowMaxSockets, flowMaxSockets+flowChurnTW)}
	for i := 0; i < flowChurnTW; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointFrom(lo, uint16(41000+i)), Remote: snapshot.EndpointOf(svc), Expires: 59_000})
	}
	if len(unownedFlows(s)) != 1 {
		t.Fatalf("need %v", unownedFlows(s))
	}
	var c Collector
	c.nameFlowOwners(netns.NS{}, s, &procs.Owners{}, "/proc")
	why, failed := s.Failed(snapshot.SourceFlowOwners)
	if !failed || !strings.Contains(why, fmt.Sprintf("more than %d sockets", flowMaxSockets)) || len(s.FlowOwners) != 0 {
		t.Errorf("failed %v %q, owners %+v", failed, why, s.FlowOwners)
	}
}

// TestFlowOwnersNamesShortConnections: a client opening a connection per
// request, each living a few milliseconds, is named: by the second look
// in every sample where the owner scan caught none of its connections,
// or through the one the scan caught (the look then stays away).
func TestFlowOwnersNamesShortConnections(t *testing.T) {
	ns := testns.New(t, "flow")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 for the churning client")
	}
	const prog = `
import socket, threading, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 7070)); srv.listen(4096)
def serve():
    while True:
        c, _ = srv.accept(); c.recv(16); c.send(b"ok"); time.sleep(0.002); c.close()
threading.Thread(target=serve, daemon=True).start()
end = time.time() + 8
while time.time() < end:
    s = socket.create_connection(("127.0.0.1", 7070)); s.send(b"q"); s.recv(16); s.close()
`
	cmd := exec.Command("ip", "netns", "exec", ns.Name, py, "-c", prog)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	time.Sleep(time.Second)
	c := &Collector{Opts: Options{Owners: true}, Now: time.Now}
	named, due, looked := 0, 0, 0
	for i := 0; i < 3; i++ {
		s := c.Collect([]netns.NS{ns})[0]
		if why, stopped := s.Failed(snapshot.SourceFlowOwners); stopped {
			t.Skipf("no second look on this host: %s", why)
		}
		if namesOpener(s, 7070, "python3") {
			named++
		}
		// The scan caught none of the flow's connections: the look was
		// due, and must name it.
		if len(unownedFlows(s)) > 0 {
			due++
			if namesFlowOwner(s, 7070, "python3") {
				looked++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if named == 0 {
		t.Fatal("the churning python3 was not named in any of 3 samples")
	}
	if due > 0 && looked == 0 {
		t.Fatalf("the second look was due in %d samples and named python3 in none", due)
	}
	t.Logf("named in %d of 3 samples; the second look was due in %d and named it in %d", named, due, looked)
}

// namesOpener tells whether s names comm as the opener of connections to
// port, as the churn model reads it: a live client socket's owner, or a
// flow owner from the second look.
func namesOpener(s *snapshot.Snapshot, port uint16, comm string) bool {
	is := func(pid int) bool { return s.Procs[pid] != nil && s.Procs[pid].Command == comm }
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.Remote.Port() == port && sk.State != snapshot.TimeWait && sk.Pids.Len() > 0 && is(sk.Pids.List()[0]) {
			return true
		}
	}
	return namesFlowOwner(s, port, comm)
}

// namesFlowOwner tells whether the second look named comm as the opener
// of connections to port.
func namesFlowOwner(s *snapshot.Snapshot, port uint16, comm string) bool {
	for _, fo := range s.FlowOwners {
		if fo.Remote.Port() == port && s.Procs[fo.Pid] != nil && s.Procs[fo.Pid].Command == comm {
			return true
		}
	}
	return false
}

package rules

import (
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSockdiagReady: the rules that read tcp_info say unknown when no
// established socket has one, counting them all, and go ahead when any
// has, wherever it stands in the dump.
func TestSockdiagReady(t *testing.T) {
	var ti snapshot.TCPInfo
	bare := snapshot.Socket{State: snapshot.Established}
	full := snapshot.Socket{State: snapshot.Established, Info: snapshot.TCPOf(&ti)}
	ln := snapshot.Socket{State: snapshot.Listen}
	for _, c := range []struct {
		name    string
		sockets []snapshot.Socket
		want    string // "" ready, else part of the reason
	}{
		{"empty", nil, ""},
		{"listener only", []snapshot.Socket{ln}, ""},
		{"none has tcp_info", []snapshot.Socket{bare, ln, bare, bare}, "any of 3 established"},
		{"the last has one", []snapshot.Socket{bare, ln, bare, full}, ""},
		{"the first has one", []snapshot.Socket{full, bare}, ""},
	} {
		err := sockdiagReady(&snapshot.Snapshot{Sockets: c.sockets})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want ready", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

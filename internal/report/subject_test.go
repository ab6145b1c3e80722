// SPDX-License-Identifier: Apache-2.0

package report

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSubjectText: the one text of a subject, from its typed addresses
// and the workload the engine named, is the same text history prints of
// the subject read back from its JSON (which keeps the workload's names,
// not its id).
func TestSubjectText(t *testing.T) {
	api := &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef0123", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "aaaaaaaaaaaaaaaa", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	web := &snapshot.Workload{Runtime: "docker", ID: "fedcba9876543210fedc", Container: "web"}
	local, remote := diag.At(netip.MustParseAddrPort("[2001:db8::1]:8080")), diag.Host(netip.MustParseAddr("2001:db8::50"))
	for _, c := range []struct {
		s    diag.Subject
		want string
	}{
		{diag.Subject{Netns: "shop/web-1", Local: local, Remote: remote, Pid: 7, Command: "api-server", Workload: api},
			"[2001:db8::1]:8080 -> 2001:db8::50 (api-server pid 7) pod shop/web-1 container api"},
		{diag.Subject{Netns: "shop/web-1", Local: local, Service: diag.At(netip.MustParseAddrPort("[::]:8080")), Workload: sandbox},
			"[2001:db8::1]:8080 service [::]:8080 pod shop/web-1"},
		{diag.Subject{Netns: "cni-1234", Remote: remote, Workload: api, Peers: []diag.Count{{Key: "2001:db8::50", N: 2}, {Key: "2001:db8::51", N: 1}}},
			"-> 2001:db8::50 peers 2001:db8::50 2, 2001:db8::51 1 pod shop/web-1 container api netns cni-1234"},
		{diag.Subject{Netns: "pid:9", Pid: 9, Command: "nginx", Workload: web}, "(nginx pid 9) container web netns pid:9"},
		{diag.Subject{Netns: "host", Pid: 812, Command: "sshd", Workload: &snapshot.Workload{Runtime: "systemd", Unit: "sshd.service"}},
			"(sshd pid 812) unit sshd.service netns host"},
	} {
		if got := SubjectText(c.s); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.s, got, c.want)
		}
		b, err := json.Marshal(c.s)
		if err != nil {
			t.Fatal(err)
		}
		var back diag.Subject
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := SubjectText(back); got != c.want {
			t.Errorf("read back from %s:\n got %q\nwant %q", b, got, c.want)
		}
	}
}

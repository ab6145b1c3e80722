// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSubjectJSON: the typed subject writes docs/json.md's members, the
// strings they always had (addresses as netip prints them, an address
// alone without a port, the workload as pod, pod_namespace, container by
// name else short id, unit), and reads back to the same JSON.
func TestSubjectJSON(t *testing.T) {
	api := &snapshot.Workload{Runtime: "containerd", ID: "0123456789abcdef0123", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	unnamed := &snapshot.Workload{Runtime: "docker", ID: "fedcba9876543210fedc"}
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "aaaaaaaaaaaaaaaa", Pod: "db-0", PodNamespace: "shop", Sandbox: true}
	for _, c := range []struct {
		s    Subject
		want string
	}{
		{Subject{}, `{}`},
		{Subject{Netns: "host", Local: At(netip.MustParseAddrPort("0.0.0.0:8080")), Pid: 4242, Command: "java"},
			`{"netns":"host","local":"0.0.0.0:8080","pid":4242,"command":"java"}`},
		{Subject{Netns: "shop/web-1", Local: At(netip.MustParseAddrPort("[2001:db8::1]:80")), Remote: Host(netip.MustParseAddr("2001:db8::50")),
			Service: At(netip.MustParseAddrPort("[2001:db8::1]:80")), Pid: 7, Command: "api-server", Workload: api,
			Peers: []Count{{Key: "2001:db8::50", N: 3}}},
			`{"netns":"shop/web-1","local":"[2001:db8::1]:80","remote":"2001:db8::50","service":"[2001:db8::1]:80","pid":7,"command":"api-server","pod":"web-1","pod_namespace":"shop","container":"api","peers":[{"key":"2001:db8::50","n":3}]}`},
		{Subject{Netns: "pid:9", Remote: Host(netip.MustParseAddr("10.0.0.9")), Workload: unnamed},
			`{"netns":"pid:9","remote":"10.0.0.9","container":"fedcba987654"}`},
		{Subject{Netns: "shop/db-0", Workload: sandbox, Peer: &Peer{Netns: "shop/web-1", Local: At(netip.MustParseAddrPort("10.1.0.5:443")), Pid: 7, Command: "api-server", Workload: api}},
			`{"netns":"shop/db-0","pod":"db-0","pod_namespace":"shop","peer":{"netns":"shop/web-1","local":"10.1.0.5:443","pid":7,"command":"api-server","pod":"web-1","pod_namespace":"shop","container":"api"}}`},
		{Subject{Netns: "host", Pid: 812, Command: "sshd", Workload: &snapshot.Workload{Runtime: "systemd", Unit: "sshd.service"}},
			`{"netns":"host","pid":812,"command":"sshd","unit":"sshd.service"}`},
	} {
		b, err := json.Marshal(c.s)
		if err != nil || string(b) != c.want {
			t.Errorf("%+v:\n got %s (%v)\nwant %s", c.s, b, err, c.want)
			continue
		}
		var back Subject
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		if again, _ := json.Marshal(back); string(again) != c.want {
			t.Errorf("read back %s writes %s", c.want, again)
		}
		if back.Local != c.s.Local || back.Remote != c.s.Remote || back.Service != c.s.Service {
			t.Errorf("%s: addresses read back as %v %v %v", b, back.Local, back.Remote, back.Service)
		}
	}
	for _, bad := range []string{`{"local":"shop/web-1 10.0.0.1:80"}`, `{"remote":"10.0.0.1:x"}`} {
		var s Subject
		if err := json.Unmarshal([]byte(bad), &s); err == nil {
			t.Errorf("%s: read as %+v", bad, s)
		}
	}
}

// TestAddress: an address and port, or an address alone, and nothing;
// each reads back from its text.
func TestAddress(t *testing.T) {
	for text, a := range map[string]Address{
		"10.0.0.1:80":          At(netip.MustParseAddrPort("10.0.0.1:80")),
		"[::ffff:10.0.0.1]:80": At(netip.MustParseAddrPort("[::ffff:10.0.0.1]:80")),
		"::1":                  Host(netip.MustParseAddr("::1")),
		"":                     At(netip.AddrPort{}),
	} {
		_, withPort := a.AddrPort()
		back, err := ParseAddress(text)
		if a.String() != text || withPort != strings.HasSuffix(text, ":80") || err != nil || back != a {
			t.Errorf("%#v: text %q (want %q), has a port %v, reads back as %#v, %v", a, a.String(), text, withPort, back, err)
		}
	}
	if Host(netip.Addr{}) != (Address{}) {
		t.Error("an invalid address alone is not none")
	}
}

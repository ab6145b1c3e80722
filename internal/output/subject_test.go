// SPDX-License-Identifier: Apache-2.0

package output

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Each printer's form of the subject, as it has always printed it.
func TestSubjectForms(t *testing.T) {
	procs := map[int]*snapshot.Proc{4242: {Pid: 4242, Command: "java"}}
	host, lab := &snapshot.Netns{Name: "host"}, &snapshot.Netns{Name: "tdlab-a"}
	owned := SocketSubject(host, &snapshot.Socket{Pids: snapshot.PidsOf(4242, 7)}, procs)
	unknown := SocketSubject(host, &snapshot.Socket{Pids: snapshot.PidsOf(99)}, procs)
	none := SocketSubject(lab, &snapshot.Socket{}, procs)
	for _, c := range []struct {
		what                  string
		s                     Subject
		process, pidForm, pid string
		json                  string
	}{
		{"owned socket", owned, "java/4242", "(java pid 4242)", "4242", `"netns":"host","pid":4242,"command":"java"`},
		{"owner not read", unknown, "?/99", "( pid 99)", "99", `"netns":"host","pid":99,"command":null`},
		{"no owner", none, "-", "", "-", `"netns":"tdlab-a","pid":null,"command":null`},
		{"event of a process", ProcessSubject("host", 77, "nginx"), "nginx/77", "(nginx pid 77)", "77", `"netns":"host","pid":77,"command":"nginx"`},
		{"event of none", ProcessSubject("host", 0, ""), "-", "", "-", `"netns":"host","pid":null,"command":null`},
		{"finding with a command only", Subject{Command: "java", HasCommand: true}, "-", "(java pid 0)", "-", `"netns":"","pid":null,"command":"java"`},
	} {
		if got := string(c.s.AppendProcess(nil)); got != c.process {
			t.Errorf("%s: AppendProcess %q, want %q", c.what, got, c.process)
		}
		if got := c.s.ProcessPid(); got != c.pidForm {
			t.Errorf("%s: ProcessPid %q, want %q", c.what, got, c.pidForm)
		}
		if got := c.s.PidText(); got != c.pid {
			t.Errorf("%s: PidText %q, want %q", c.what, got, c.pid)
		}
		if got := string(c.s.AppendJSON(nil)); got != c.json {
			t.Errorf("%s: AppendJSON %s, want %s", c.what, got, c.json)
		}
	}
}

// The workload of a socket is its owner's, else its namespace's, and
// each form says a pod or container once: by the namespace when it names
// it already.
func TestSubjectWorkload(t *testing.T) {
	api := &snapshot.Workload{Runtime: "containerd", ID: "4f1e2d3c4b5a69788796a5b4c3d2e1f0", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "99aa", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	unit := &snapshot.Workload{Runtime: "systemd", Unit: "nginx.service"}
	docker := &snapshot.Workload{Runtime: "docker", ID: "553950edcfc6aaaa", Container: "web"}
	procs := map[int]*snapshot.Proc{10: {Pid: 10, Command: "api-server", Workload: api}, 11: {Pid: 11, Command: "nginx", Workload: unit},
		12: {Pid: 12, Command: "sh"}}
	pod := &snapshot.Netns{Name: "shop/web-1", Workload: sandbox}
	host := &snapshot.Netns{Name: "host"}
	for _, c := range []struct {
		what               string
		s                  Subject
		column, phrase, ns string
		json               string
	}{
		{"pod's container in the pod's namespace", SocketSubject(pod, &snapshot.Socket{Pids: snapshot.PidsOf(10)}, procs),
			"shop/web-1 api", "pod shop/web-1 container api", "", `,"pod":"web-1","pod_namespace":"shop","container":"api"`},
		{"unowned socket in a pod's namespace", SocketSubject(pod, &snapshot.Socket{}, procs),
			"shop/web-1", "pod shop/web-1", "", `,"pod":"web-1","pod_namespace":"shop"`},
		{"process of a pod on the host network", SocketSubject(host, &snapshot.Socket{Pids: snapshot.PidsOf(10)}, procs),
			"shop/web-1 api", "pod shop/web-1 container api", "netns host", `,"pod":"web-1","pod_namespace":"shop","container":"api"`},
		{"process of a unit", SocketSubject(host, &snapshot.Socket{Pids: snapshot.PidsOf(11)}, procs),
			"nginx.service", "unit nginx.service", "netns host", `,"unit":"nginx.service"`},
		{"process in nothing known", SocketSubject(host, &snapshot.Socket{Pids: snapshot.PidsOf(12)}, procs),
			"-", "", "netns host", ``},
		{"container in a namespace of another name", Subject{Netns: "pid:77", Workload: docker},
			"web", "container web", "netns pid:77", `,"container":"web"`},
		{"container naming its namespace", Subject{Netns: "web", Workload: docker},
			"web", "", "", `,"container":"web"`},
		{"hostile names", Subject{Netns: "x", Workload: &snapshot.Workload{ID: "1", Container: "a\x1b[2J"}},
			`a\x1b[2J`, `container a\x1b[2J`, "netns x", `,"container":"a\u001b[2J"`},
	} {
		if got := string(c.s.AppendWorkload(nil)); got != c.column {
			t.Errorf("%s: AppendWorkload %q, want %q", c.what, got, c.column)
		}
		if got := c.s.WorkloadPhrase(); got != c.phrase {
			t.Errorf("%s: WorkloadPhrase %q, want %q", c.what, got, c.phrase)
		}
		if got, want := c.s.WorkloadBesideNetns(), strings.TrimPrefix(strings.TrimPrefix(c.phrase, "pod "+c.s.Netns), " "); got != want {
			t.Errorf("%s: WorkloadBesideNetns %q, want %q", c.what, got, want)
		}
		if got := c.s.NetnsPhrase(); got != c.ns {
			t.Errorf("%s: NetnsPhrase %q, want %q", c.what, got, c.ns)
		}
		if got := string(c.s.AppendWorkloadJSON(nil)); got != c.json {
			t.Errorf("%s: AppendWorkloadJSON %s, want %s", c.what, got, c.json)
		}
	}
}

func TestNetnsLabel(t *testing.T) {
	for _, c := range []struct {
		ino   uint64
		name  string
		named bool
		want  string
	}{{4026531840, "host", true, "host"}, {4026532000, "", false, "ns:4026532000"}, {0, "", false, "?"}} {
		if got := NetnsLabel(c.ino, c.name, c.named); got != c.want {
			t.Errorf("NetnsLabel(%d, %q, %v) = %q, want %q", c.ino, c.name, c.named, got, c.want)
		}
	}
}

// FuzzSubject: whatever a process or namespace is called, the text forms
// hold no control character (textsafe) and the JSON members are valid
// JSON that gives the names back unchanged (valid UTF-8 ones).
func FuzzSubject(f *testing.F) {
	f.Add("host", "java", 4242)
	f.Add("\x1b]0;PWN\x07\x1b[2J\nX", "a\tb\u2028\xff", 1)
	f.Add("", "", 0)
	f.Fuzz(func(t *testing.T, netns, command string, pid int) {
		s := ProcessSubject(netns, pid, command)
		for _, text := range []string{s.NetnsText(), string(s.AppendProcess(nil)), s.ProcessPid(), s.PidText(), s.CommandText()} {
			if i := strings.IndexFunc(text, unicode.IsControl); i >= 0 {
				t.Fatalf("control character in %q", text)
			}
		}
		obj := "{" + string(s.AppendJSON(nil)) + "}"
		var got struct {
			Netns   string  `json:"netns"`
			Pid     *int    `json:"pid"`
			Command *string `json:"command"`
		}
		if err := json.Unmarshal([]byte(obj), &got); err != nil {
			t.Fatalf("invalid JSON %s: %v", obj, err)
		}
		if (got.Pid != nil) != (pid != 0) || got.Pid != nil && *got.Pid != pid {
			t.Fatalf("pid %d came back as %v", pid, got.Pid)
		}
		want, _ := json.Marshal(netns)
		if !strings.HasPrefix(obj, `{"netns":`+string(want)+",") {
			t.Fatalf("netns %q encoded as %s, encoding/json says %s", netns, obj, want)
		}
	})
}

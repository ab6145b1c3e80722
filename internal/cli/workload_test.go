// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// podFixture is the overflow fixture as two namespaces of a Kubernetes
// node: the host's, where java (4242) is container api of the
// host-network pod shop/web-1 and sshd (812) is sshd.service, and the
// namespace of pod shop/db-0, where java is its container db. Every
// listener overflows, sshd's too.
func podFixture(t *testing.T) string {
	t.Helper()
	l := fixtureLines(t)
	web := &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("a", 64), Container: "api", Pod: "web-1", PodNamespace: "shop"}
	db := &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("b", 64), Container: "db", Pod: "db-0", PodNamespace: "shop"}
	dbNS := &snapshot.Workload{Runtime: "containerd", ID: strings.Repeat("c", 64), Pod: "db-0", PodNamespace: "shop", Sandbox: true}
	sshd := &snapshot.Workload{Runtime: "systemd", Unit: "sshd.service"}
	out := l[0]
	for _, line := range l[1:3] {
		for _, ns := range []string{"host", "shop/db-0"} {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			procs := m["procs"].(map[string]any)
			if ns == "host" {
				procs["4242"].(map[string]any)["workload"] = web
				procs["812"].(map[string]any)["workload"] = sshd
				// sshd's listener is as full as java's: a finding of the
				// same namespace that is no pod's.
				var q any
				for _, sk := range m["sockets"].([]any) {
					if sk := sk.(map[string]any); sk["local"] == "0.0.0.0:8080" {
						q = sk["recv_q"]
					}
				}
				for _, sk := range m["sockets"].([]any) {
					if sk := sk.(map[string]any); sk["local"] == "0.0.0.0:22" {
						sk["recv_q"] = q
					}
				}
			} else {
				m["netns"] = map[string]any{"name": ns, "inode": 4026532177, "workload": dbNS}
				procs["4242"].(map[string]any)["workload"] = db
				delete(procs, "812")
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out += string(b) + "\n"
		}
	}
	return writeTemp(t, "pods.jsonl", []byte(out))
}

// TestCheckPodFilter: --pod and --container keep the findings whose
// subject is that pod or container, in a replay (names from the file).
func TestCheckPodFilter(t *testing.T) {
	path := podFixture(t)
	code, all, stderr := run(t, "check", "--from", path)
	if code != ExitFindings || !strings.Contains(all, "pod shop/web-1 container api") || !strings.Contains(all, "pod shop/db-0") || !strings.Contains(all, "sshd") {
		t.Fatalf("unfiltered: exit %d, stderr %q, out:\n%s\nwant both pods' overflows", code, stderr, all)
	}
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--pod", "shop/web-1"}, "pod shop/web-1 container api", "db-0"},
		{[]string{"--pod", "web-1", "--container", "api"}, "pod shop/web-1 container api", "db-0"},
		{[]string{"--container", "api"}, "pod shop/web-1 container api", "db-0"},
		{[]string{"--pod", "db-0"}, "pod shop/db-0", "web-1"},
		{[]string{"--container", strings.Repeat("b", 12)}, "container db", "web-1"},
	} {
		args := append([]string{"check", "--from", path}, c.args...)
		code, out, stderr := run(t, args...)
		if code != ExitFindings || !strings.Contains(out, c.want) || strings.Contains(out, c.not) || strings.Contains(out, "sshd") || !strings.Contains(out, "listen-overflow") {
			t.Errorf("%v: exit %d, stderr %q, out:\n%s\nwant %q and no %q", c.args, code, stderr, out, c.want, c.not)
		}
	}
	// JSON: every finding kept names the container.
	code, out, _ := run(t, "check", "--from", path, "--container", "db", "--json", "-v")
	var rep struct {
		Findings []struct {
			Subject struct{ Pod, Container string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitFindings || len(rep.Findings) == 0 {
		t.Fatalf("--json: exit %d, %v, %d findings", code, err, len(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.Subject.Pod != "db-0" || f.Subject.Container != "db" {
			t.Errorf("--container db kept a finding about %+v", f.Subject)
		}
	}
	// The pod's sandbox is no container: its namespace's own findings
	// (none here) would go, the unit is not a container.
	if code, out, _ := run(t, "check", "--from", path, "--pod", "db-0", "--container", "api"); code != ExitUsage || out != "" {
		t.Errorf("--pod db-0 --container api: exit %d, out %q; want a usage error", code, out)
	}
}

// TestWorkloadNotFound: a pod or container not there is a usage error
// that lists what is; a bad --pod is one too.
func TestWorkloadNotFound(t *testing.T) {
	path := podFixture(t)
	for _, args := range [][]string{
		{"check", "--from", path, "--pod", "shop/web-2"},
		{"check", "--from", path, "--container", "nginx"},
		{"sockets", "--from", path, "--pod", "web-2"},
		{"check", "--from", path, "--pod", "other/web-1"},
	} {
		code, out, stderr := run(t, args...)
		if code != ExitUsage || out != "" || !strings.Contains(stderr, "pods: shop/db-0, shop/web-1; containers: shop/db-0 db, shop/web-1 api") {
			t.Errorf("%v: exit %d, out %q, stderr %q; want exit 2 listing the pods and containers", args, code, out, stderr)
		}
	}
	for _, bad := range []string{"/web-1", "shop/", "a/b/c"} {
		if code, _, stderr := run(t, "check", "--from", path, "--pod", bad); code != ExitUsage || !strings.Contains(stderr, "want NAME or NAMESPACE/NAME") {
			t.Errorf("--pod %q: exit %d, stderr %q", bad, code, stderr)
		}
	}
	if code, _, stderr := run(t, "sockets", "--from", path, "--container", "shop/api"); code != ExitUsage || !strings.Contains(stderr, "has no '/'") {
		t.Errorf("--container shop/api: exit %d, stderr %q", code, stderr)
	}
	// Live, without a resolver: said, not "healthy".
	if code, _, stderr := run(t, "check", "--interval", "0", "--pod", "web-1"); code != ExitUsage || !strings.Contains(stderr, "resolves none") {
		t.Errorf("live without a resolver: exit %d, stderr %q", code, stderr)
	}
}

// TestSocketsPodFilter: sockets keeps the rows whose owner (else
// namespace) is the pod or container asked for.
func TestSocketsPodFilter(t *testing.T) {
	path := podFixture(t)
	code, out, stderr := run(t, "sockets", "--from", path, "--pod", "shop/web-1", "--container", "api", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("exit %d, %v, stderr %q", code, err, stderr)
	}
	if len(rows) != 5 { // java's listener and its 4 connections in the host's namespace
		t.Errorf("%d rows, want 5: %s", len(rows), out)
	}
	for _, r := range rows {
		if r["pod"] != "web-1" || r["pod_namespace"] != "shop" || r["container"] != "api" || r["netns"] != "host" {
			t.Errorf("row %v is not shop/web-1 api's", r)
		}
	}
	code, out, _ = run(t, "sockets", "--from", path, "--pod", "db-0")
	if code != 0 || !strings.Contains(out, "shop/db-0 db") || strings.Contains(out, "web-1") || strings.Contains(out, "sshd") {
		t.Errorf("--pod db-0: exit %d, out:\n%s", code, out)
	}
}

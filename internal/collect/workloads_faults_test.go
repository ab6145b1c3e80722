// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// fakeHost is a procfs and runtime state under a temp dir, made from the
// files captured from real runtimes in internal/containers/testdata.
type fakeHost struct {
	t     testing.TB
	roots containers.Roots
}

func newFakeHost(t testing.TB) *fakeHost {
	dir := t.TempDir()
	return &fakeHost{t: t, roots: containers.Roots{
		Proc:            filepath.Join(dir, "proc"),
		ContainerdState: filepath.Join(dir, "run", "containerd"),
		Runc:            filepath.Join(dir, "run", "containerd", "runc"),
		Docker:          filepath.Join(dir, "var", "lib", "docker"),
		Storage:         filepath.Join(dir, "var", "lib", "containers", "storage"),
	}}
}

func (h *fakeHost) write(path string, b []byte) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func captured(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", "containers", "testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proc makes <proc>/<pid>/{cgroup,stat,ns/net}.
func (h *fakeHost) proc(pid int, cgroup []byte) {
	h.t.Helper()
	dir := filepath.Join(h.roots.Proc, strconv.Itoa(pid))
	h.write(filepath.Join(dir, "cgroup"), cgroup)
	stat := fmt.Sprintf("%d (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, 1000+pid)
	h.write(filepath.Join(dir, "stat"), []byte(stat))
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink("net:[4026531840]", filepath.Join(dir, "ns", "net")); err != nil {
		h.t.Fatal(err)
	}
}

// containerdApp puts pid in the captured pod's app container (shop/web-1
// api) and returns its bundle and runc state directories.
func (h *fakeHost) containerdApp(pid int) (bundle, runc string) {
	cg := captured(h.t, "containerd", "app.cgroup")
	h.proc(pid, cg)
	id := lastComponent(cg)
	bundle = filepath.Join(h.roots.ContainerdState, "io.containerd.runtime.v2.task", "k8s.io", id)
	runc = filepath.Join(h.roots.Runc, "k8s.io", id)
	h.write(filepath.Join(bundle, "config.json"), captured(h.t, "containerd", "app.config.json"))
	h.write(filepath.Join(runc, "state.json"), captured(h.t, "containerd", "app.state.json"))
	return bundle, runc
}

// lastComponent is the container id at the end of a cgroup file's first
// line.
func lastComponent(cg []byte) string {
	line, _, _ := bytes.Cut(cg, []byte("\n"))
	return strings.TrimPrefix(filepath.Base(string(line)), "libpod-")
}

// The listen-overflow recording: pid 4242 owns the overflowing listener
// (the finding's subject), pid 812 is sshd.
const (
	subjectPid = 4242
	otherPid   = 812
)

// TestWorkloadFaults: whatever goes wrong while naming, the finding is
// still reported; the name is omitted where it could not be read, and
// the check report says why (a NOTE in text, source_errors in JSON,
// source "containers"); a process gone, or in a cgroup of no container,
// is passed over without a word. Two runtimes on one host each name
// their own containers.
func TestWorkloadFaults(t *testing.T) {
	unit := []byte("0::/system.slice/ssh.service\n")
	for _, c := range []struct {
		name      string
		setup     func(h *fakeHost)
		label     string // the subject's "pod ... container ..." text, "" when not named
		note      string // in the containers source error, "" for none
		otherName string // the container name of pid 812
	}{
		{"named", func(h *fakeHost) {
			h.containerdApp(subjectPid)
			h.proc(otherPid, unit)
		}, "pod shop/web-1 container api", "", ""},
		{"two runtimes on one host", func(h *fakeHost) {
			// containerd's pod beside Docker's and Podman's containers.
			h.containerdApp(1)
			dcg := captured(t, "docker", "real-api.cgroup")
			h.proc(subjectPid, dcg)
			h.write(filepath.Join(h.roots.Docker, "containers", lastComponent(dcg), "config.v2.json"), captured(t, "docker", "real-api.config.v2.json"))
			pcg := captured(t, "podman", "web.cgroup")
			h.proc(otherPid, pcg)
			store := filepath.Join(h.roots.Storage, "overlay-containers")
			h.write(filepath.Join(store, "containers.json"), captured(t, "podman", "containers.json"))
			h.write(filepath.Join(store, lastComponent(pcg), "userdata", "config.json"), captured(t, "podman", "web.config.json"))
		}, "pod shop/web-1 container api", "", "web"},
		{"container exits mid-read: its state is gone, the process not yet", func(h *fakeHost) {
			bundle, runc := h.containerdApp(subjectPid)
			_ = os.RemoveAll(bundle)
			_ = os.RemoveAll(runc)
			h.proc(otherPid, unit)
		}, "", "no runtime state found", ""},
		{"process gone mid-read", func(h *fakeHost) {
			h.containerdApp(subjectPid)
			_ = os.RemoveAll(filepath.Join(h.roots.Proc, strconv.Itoa(subjectPid)))
			h.proc(otherPid, unit)
		}, "", "", ""},
		{"state files truncated", func(h *fakeHost) {
			bundle, runc := h.containerdApp(subjectPid)
			for _, p := range []string{filepath.Join(bundle, "config.json"), filepath.Join(runc, "state.json")} {
				b, _ := os.ReadFile(p)
				h.write(p, b[:len(b)/2])
			}
			h.proc(otherPid, unit)
		}, "", "unexpected end of JSON input", ""},
		{"runtime directory unreadable", func(h *fakeHost) {
			h.proc(subjectPid, captured(t, "containerd", "app.cgroup"))
			// A file where each directory is: root reads any mode.
			h.write(filepath.Join(h.roots.ContainerdState, "io.containerd.runtime.v2.task"), []byte("x"))
			h.write(h.roots.Runc, []byte("x"))
			h.proc(otherPid, unit)
		}, "", "containerd namespaces", ""},
		{"cgroup path of an unknown shape", func(h *fakeHost) {
			h.proc(subjectPid, []byte("0::/weird/a/b/c\n"))
			h.proc(otherPid, unit)
		}, "", "", ""},
		{"kubelet's layout, no runtime knows the id", func(h *fakeHost) {
			h.proc(subjectPid, []byte("0::/kubepods/besteffort/pod3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b/"+strings.Repeat("ab", 32)+"\n"))
			h.proc(otherPid, unit)
		}, "", "no runtime state found", ""},
		{"garbage cgroup file", func(h *fakeHost) {
			h.proc(subjectPid, []byte("\x00\xff:::\n::\n0::/kubepods/podzz/../..\n"))
			h.proc(otherPid, unit)
		}, "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newFakeHost(t)
			c.setup(h)
			snaps := readRecording(t)
			r := containers.NewResolver(containers.Options{Roots: h.roots})
			for _, s := range snaps {
				nameProcs(s, r)
			}
			rs := rules.All()
			rep := report.Diagnose(slices.Values([]*diag.Input{diag.NewInput(snaps[0], snaps[len(snaps)-1], diag.Options{})}), rs)
			var f *diag.Finding
			for i := range rep.Findings {
				if rep.Findings[i].Rule == "listen-overflow" {
					f = &rep.Findings[i]
				}
			}
			if f == nil {
				t.Fatalf("listen-overflow not reported: %+v", rep.Findings)
			}
			var text, js bytes.Buffer
			report.WriteText(&text, rep, report.Style{MinSeverity: diag.Info})
			if err := report.WriteJSON(&js, rep); err != nil {
				t.Fatal(err)
			}
			named := strings.Contains(text.String(), "pod shop/web-1 container api")
			switch {
			case c.label != "" && (!named || f.Subject.Workload.PodName() != "shop/web-1" || f.Subject.Workload.ContainerName() != "api"):
				t.Errorf("subject %+v; want %s:\n%s", f.Subject, c.label, text.String())
			case c.label == "" && (named || f.Subject.Workload.PodName() != ""):
				t.Errorf("subject %+v named a pod it could not read:\n%s", f.Subject, text.String())
			}
			var notes []string
			for _, se := range rep.Sources {
				if se.Source == snapshot.SourceContainers {
					notes = append(notes, se.Error)
				}
			}
			switch {
			case c.note == "" && len(notes) > 0:
				t.Errorf("notes %q, want none", notes)
			case c.note != "":
				if len(notes) == 0 || !strings.Contains(notes[len(notes)-1], c.note) {
					t.Errorf("notes %q, want one saying %q", notes, c.note)
				}
				if !strings.Contains(text.String(), "NOTE source containers in netns host incomplete: ") ||
					!strings.Contains(js.String(), `"source": "containers"`) {
					t.Errorf("the note is not in the report:\n%s\n%s", text.String(), js.String())
				}
			}
			if c.otherName != "" {
				if w := snaps[len(snaps)-1].Procs[otherPid].Workload; w == nil || w.Container != c.otherName {
					t.Errorf("pid %d: %+v, want container %s", otherPid, w, c.otherName)
				}
			}
		})
	}
}

// readRecording reads the listen-overflow recording (two snapshots of
// netns "host").
func readRecording(t *testing.T) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "rules", "testdata", "listen-overflow", "fires.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	snaps, err := snapshot.ReadAll(f)
	if err != nil || len(snaps) < 2 {
		t.Fatalf("recording: %d snapshots, %v", len(snaps), err)
	}
	for _, s := range snaps {
		if s.Procs[subjectPid] == nil {
			t.Fatalf("recording has no process %d", subjectPid)
		}
	}
	return snaps
}

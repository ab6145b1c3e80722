// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestWorkloadNotNamedNote: when a container's name could not be read
// (internal/collect's TestWorkloadFaults makes these snapshots from real
// runtime files; here they are written as collect leaves them: the
// process keeps only the id from its cgroup path, and the snapshot
// carries the "containers" source error), `check` still reports the
// finding, with the short id, exits 1 (findings), not 3, and says why
// (the text NOTE, JSON source_errors); `sockets` says it on stderr.
func TestWorkloadNotNamedNote(t *testing.T) {
	f, err := os.Open(overflowFixture)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.ReadAll(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	const id = "0f4c5e4c1f1b8f2a0f4c5e4c1f1b8f2a0f4c5e4c1f1b8f2a0f4c5e4c1f1b8f2a"
	const why = "1 process(es) not fully named: containers: pid 4242: container 0f4c5e4c1f1b: no runtime state found"
	var buf bytes.Buffer
	w, err := snapshot.NewWriter(&buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		s.Procs[4242].Workload = &snapshot.Workload{Runtime: "containerd", ID: id, PodUID: "3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b"}
		s.AddError(snapshot.SourceContainers, errors.New(why))
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "faulty.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, _ := run(t, "check", "--from", path)
	if code != ExitFindings {
		t.Errorf("check exit %d, want %d (findings)", code, ExitFindings)
	}
	if !strings.Contains(out, "listen-overflow") || !strings.Contains(out, "container 0f4c5e4c1f1b") || strings.Contains(out, "pod ") {
		t.Errorf("check text: want the finding with the short id and no pod:\n%s", out)
	}
	if !strings.Contains(out, "NOTE source containers in netns host incomplete: "+why) {
		t.Errorf("check text: no note:\n%s", out)
	}
	code, out, _ = run(t, "check", "--json", "--from", path)
	var rep struct {
		Findings []struct {
			Rule    string
			Subject map[string]any
		}
		SourceErrors []struct{ Netns, Source, Error string } `json:"source_errors"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitFindings {
		t.Fatalf("check --json: exit %d, %v:\n%s", code, err, out)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Rule == "listen-overflow" {
			found = true
			if f.Subject["container"] != "0f4c5e4c1f1b" || f.Subject["pod"] != nil {
				t.Errorf("subject %v: want container 0f4c5e4c1f1b, no pod", f.Subject)
			}
		}
	}
	noted := false
	for _, se := range rep.SourceErrors {
		noted = noted || se.Source == "containers" && se.Error == why
	}
	if !found || !noted {
		t.Errorf("check --json: finding %v, note %v: %+v", found, noted, rep)
	}
	code, _, errOut := run(t, "sockets", "--from", path)
	if code != 0 || !strings.Contains(errOut, "tcpdoctor: note: netns host: source containers incomplete: "+why) {
		t.Errorf("sockets: exit %d, stderr %q; want 0 and the note", code, errOut)
	}
}

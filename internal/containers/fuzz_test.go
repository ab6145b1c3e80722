// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedFiles adds every captured or hand-written file matching glob.
func seedFiles(f *testing.F, glob string) {
	names, err := filepath.Glob(filepath.Join("testdata", glob))
	if err != nil || len(names) == 0 {
		f.Fatalf("no seeds for %s: %v", glob, err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2]) // truncated, as a file read while written
	}
}

// FuzzParseCgroup: any bytes parse without a panic, and an id or unit
// found is in the input, a name that is safe to join to a path.
func FuzzParseCgroup(f *testing.F) {
	seedFiles(f, "containerd/*.cgroup")
	for _, c := range cgroupCases {
		f.Add([]byte(c.file))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := parseCgroup(b)
		for _, s := range []string{r.ID, r.Namespace, r.Unit} {
			if s != "" && !bytes.Contains(b, []byte(s)) {
				t.Fatalf("%q not in the input", s)
			}
		}
		if r.ID != "" && (!validID(r.ID) && !isHexID(r.ID)) {
			t.Fatalf("id %q is no valid id", r.ID)
		}
		if strings.ContainsAny(r.ID+r.Namespace, "/\x00") || r.ID == ".." || r.Namespace == ".." {
			t.Fatalf("id %q or namespace %q could leave its directory", r.ID, r.Namespace)
		}
		if r.Plain && r.Runtime != Containerd {
			t.Fatalf("plain shape with runtime %q", r.Runtime)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	seedFiles(f, "containerd/*.config.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := parseSpec(b)
		if err != nil && i != (Info{}) {
			t.Fatalf("error %v with %#v", err, i)
		}
		_ = String(i)
	})
}

func FuzzParseRuncState(f *testing.F) {
	seedFiles(f, "containerd/*.state.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := parseRuncState(b)
		if err != nil && i != (Info{}) {
			t.Fatalf("error %v with %#v", err, i)
		}
		_ = String(i)
	})
}

func FuzzParseDockerConfig(f *testing.F) {
	seedFiles(f, "docker/*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := parseDockerConfig(b)
		if err != nil && i != (Info{}) {
			t.Fatalf("error %v with %#v", err, i)
		}
		if err == nil && i.Runtime != Docker {
			t.Fatalf("runtime %q", i.Runtime)
		}
		_ = String(i)
	})
}

// FuzzParseStartTime: the stat line's start time is field 22 however
// the command (field 2) is spelt.
func FuzzParseStartTime(f *testing.F) {
	seedFiles(f, "containerd/*.stat")
	f.Add([]byte("1 (a) b) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseStartTime(b)
		if err != nil {
			return
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); len(f) < 20 || f[19] == "" {
			t.Fatalf("start %d from %q", v, b)
		}
	})
}

func FuzzParseNSLink(f *testing.F) {
	f.Add("net:[4026532177]")
	f.Add("net:[]")
	f.Add("mnt:[1")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseNSLink(s)
	})
}

// TestParseStartTimeCaptured reads field 22 of the captured stat lines;
// the value is the one runc recorded as init_process_start.
func TestParseStartTimeCaptured(t *testing.T) {
	for _, role := range []string{"app", "sandbox", "plain"} {
		got, err := parseStartTime(readFixture(t, "containerd", role+".stat"))
		var st struct {
			Start uint64 `json:"init_process_start"`
		}
		if jerr := json.Unmarshal(readFixture(t, "containerd", role+".state.json"), &st); jerr != nil {
			t.Fatal(jerr)
		}
		if err != nil || got != st.Start {
			t.Errorf("%s: start %d, %v; runc recorded %d", role, got, err, st.Start)
		}
	}
	if _, err := parseStartTime([]byte("1 (x) S 1")); err == nil {
		t.Error("short stat line: no error")
	}
	if v, err := parseStartTime([]byte("1 (a) b) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0")); v != 77 || err != nil {
		t.Errorf("command with ') ': %d, %v", v, err)
	}
}

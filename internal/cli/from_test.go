// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fixtureLines is the overflow fixture's header and its two samples (5 s
// apart), each with its newline.
func fixtureLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(overflowFixture)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) < 3 || !strings.HasSuffix(lines[2], "\n") {
		t.Fatalf("fixture has %d lines", len(lines))
	}
	return lines[:3]
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFromTornLastLine: a recorder stopped mid-write leaves its complete
// samples readable (docs/snapshot-format.md): the cut line is dropped
// with a note, plain or gzip, and the diagnosis is the whole file's.
func TestFromTornLastLine(t *testing.T) {
	l := fixtureLines(t)
	whole := l[0] + l[1] + l[2]
	partial := l[2][:len(l[2])/2] // a third sample cut mid-write
	_, want, _ := run(t, "check", "--from", overflowFixture)

	// gzip of the whole file and half a line more, cut before its end
	// marker: the reader gets an unexpected EOF inside line 4.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(whole))
	zw.Flush()
	atLine := z.Len() // the three lines are all out
	zw.Write([]byte(partial))
	zw.Flush()
	cutGzip := z.Bytes()[:z.Len()-1]
	for name, data := range map[string][]byte{
		"plain":        []byte(whole + partial),
		"gzip":         cutGzip,
		"gzip-at-line": z.Bytes()[:atLine],
	} {
		path := writeTemp(t, "rec", data)
		code, out, stderr := run(t, "check", "--from", path)
		if code != ExitFindings || out != want {
			t.Errorf("%s: exit %d, stderr %q; want the whole file's diagnosis (exit 1)", name, code, stderr)
		}
		if !strings.Contains(stderr, "line 4 is incomplete") || !strings.Contains(stderr, "used the 2 complete samples") {
			t.Errorf("%s: stderr %q does not say what was cut", name, stderr)
		}
	}

	// One complete sample left: check says the window is missing.
	path := writeTemp(t, "one", []byte(l[0]+l[1]+partial))
	code, _, stderr := run(t, "check", "--from", path)
	if code == ExitUsage || !strings.Contains(stderr, "line 3 is incomplete") || !strings.Contains(stderr, "only one complete sample") {
		t.Errorf("one complete sample: exit %d, stderr %q", code, stderr)
	}
	// None: a usage error saying so.
	path = writeTemp(t, "none", []byte(l[0]+partial))
	if code, _, stderr := run(t, "check", "--from", path); code != ExitUsage || !strings.Contains(stderr, "no complete sample") {
		t.Errorf("no complete sample: exit %d, stderr %q", code, stderr)
	}
	// A damaged line before the end is not a stopped recorder: an error.
	path = writeTemp(t, "middle", []byte(l[0]+l[1]+partial+"\n"+l[2]))
	if code, _, stderr := run(t, "check", "--from", path); code != ExitUsage || !strings.Contains(stderr, "line 3") {
		t.Errorf("damaged middle line: exit %d, stderr %q", code, stderr)
	}
	// sockets reads the same way.
	path = writeTemp(t, "rec", []byte(whole+partial))
	if code, _, stderr := run(t, "sockets", "--from", path); code != ExitOK || !strings.Contains(stderr, "line 4 is incomplete") {
		t.Errorf("sockets: exit %d, stderr %q", code, stderr)
	}
}

// TestFromImpossibleWindow: two samples of a namespace at one time, or
// the later one first, are refused, not divided by.
func TestFromImpossibleWindow(t *testing.T) {
	l := fixtureLines(t)
	second := func(taken string) string {
		return strings.Replace(l[2], `"taken":"2025-03-02T10:00:05Z"`, `"taken":"`+taken+`"`, 1)
	}
	if second("x") == l[2] {
		t.Fatal("fixture's second sample is not taken at 10:00:05")
	}
	for name, taken := range map[string]string{
		"equal":    "2025-03-02T10:00:00Z",
		"reversed": "2025-03-02T09:59:55Z",
	} {
		path := writeTemp(t, name, []byte(l[0]+l[1]+second(taken)))
		for _, cmd := range [][]string{{"check", "--json"}, {"sockets"}, {"bdp", "--rtt", "20ms", "--bandwidth", "100mbit"}} {
			args := append([]string{cmd[0], "--from", path}, cmd[1:]...)
			code, out, stderr := run(t, args...)
			if code != ExitUsage || !strings.Contains(stderr, "line 3") || !strings.Contains(stderr, "not after its previous sample") {
				t.Errorf("%s: %v: exit %d, stderr %q, want exit 2 naming line 3", name, cmd, code, stderr)
			}
			var rep struct{ Window struct{ Seconds float64 } }
			if json.Unmarshal([]byte(out), &rep) == nil && rep.Window.Seconds <= 0 {
				t.Errorf("%s: %v: a report with window %v s", name, cmd, rep.Window.Seconds)
			}
		}
	}
}

// TestFromBadFileExitCodes: every command reading a file gives a file it
// cannot read as a recording exit 2 (README, docs/snapshot-format.md).
func TestFromBadFileExitCodes(t *testing.T) {
	dir := t.TempDir()
	corrupt := writeTemp(t, "corrupt", []byte("{\"format\":\"tcpdoctor-snapshot\",\"version\":1}\n{\"taken\": 12\n"))
	garbage := writeTemp(t, "garbage", []byte("\x00\x01 not json\n"))
	missing := filepath.Join(dir, "missing")
	tr := traceFile(t)
	trBody, _ := os.ReadFile(tr)
	trLines := strings.SplitAfter(string(trBody), "\n")
	// Two points of connection 1 at one time.
	twice := writeTemp(t, "twice", []byte(trLines[0]+trLines[1]+trLines[2]+trLines[2]+strings.Join(trLines[3:], "")))
	for _, args := range [][]string{
		{"check", "--from", corrupt}, {"check", "--from", garbage}, {"check", "--from", missing},
		{"sockets", "--from", corrupt}, {"sockets", "--from", missing},
		{"bdp", "--rtt", "20ms", "--bandwidth", "100mbit", "--from", corrupt},
		{"trace", "--from", garbage}, {"trace", "--from", corrupt}, {"trace", "--from", missing},
		{"trace", "--from", overflowFixture}, {"trace", "--from", twice},
	} {
		if code, _, stderr := run(t, args...); code != ExitUsage || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q, want exit 2", args, code, stderr)
		}
	}
	if _, _, stderr := run(t, "trace", "--from", twice); !strings.Contains(stderr, "not after its previous one") {
		t.Errorf("two points at one time: %q", stderr)
	}
}

// TestTraceFromTornLastLine: a trace recording cut mid-write is read up
// to its last complete line, with a note (docs/trace.md).
func TestTraceFromTornLastLine(t *testing.T) {
	body, err := os.ReadFile(traceFile(t))
	if err != nil {
		t.Fatal(err)
	}
	_, want, _ := run(t, "trace", "--from", traceFile(t), "--bandwidth", "100mbit")
	s := string(body)
	cut := writeTemp(t, "cut", []byte(s+s[strings.LastIndex(s[:len(s)-1], "\n")+1:len(s)-20]))
	code, out, stderr := run(t, "trace", "--from", cut, "--bandwidth", "100mbit")
	n := strings.Count(s, "\n") + 1
	if code != ExitFindings || out != want || !strings.Contains(stderr, "line "+strconv.Itoa(n)+" is incomplete") {
		t.Errorf("exit %d, stderr %q, stdout %q; want the whole file's (exit 1) and a note on line %d", code, stderr, out, n)
	}
	// A damaged line before the end is an error.
	mid := writeTemp(t, "mid", []byte(s[:len(s)-20]+"\n"+s))
	if code, _, _ := run(t, "trace", "--from", mid); code != ExitUsage {
		t.Errorf("damaged middle line: exit %d", code)
	}
}

// SPDX-License-Identifier: Apache-2.0

package corpus

import (
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

func TestJudge(t *testing.T) {
	churn := Expect{Rule: "connection-churn", Min: diag.Warning, Max: diag.Warning, Command: "nginx", Remote: "127.0.0.1:8081"}
	leak := Expect{Rule: "close-wait-leak", Min: diag.Warning, Command: "python3", Service: "127.0.0.1:9000"}
	f := func(rule string, sev diag.Severity, s Subject) Finding {
		return Finding{Rule: rule, Severity: sev, Subject: s}
	}
	nginx := Subject{Command: "nginx", Pid: 7, Local: "127.0.0.1:40000", Remote: "127.0.0.1:8081"}
	capped := Expect{Rule: "listen-overflow", Min: diag.Warning, Command: "nginx", Fix: "worker_connections"}
	withFix := func(x Finding, text, cmd string) Finding {
		x.Fixes = append(x.Fixes, diag.Fix{Text: text, Command: cmd})
		return x
	}
	for _, c := range []struct {
		name          string
		want          []Expect
		got           []Finding
		verdict, note string // note: a substring of the notes or misses
	}{
		{"quiet and nothing", nil, nil, "pass", ""},
		{"quiet ignores info", nil, []Finding{f("slow-reader", diag.Info, Subject{})}, "pass", ""},
		{"quiet with a warning", nil, []Finding{f("slow-reader", diag.Warning, Subject{})}, "false alarm", ""},
		{"expected", []Expect{churn}, []Finding{f("connection-churn", diag.Warning, nginx)}, "pass", ""},
		{"too severe", []Expect{churn}, []Finding{f("connection-churn", diag.Critical, nginx)}, "false alarm + miss", ""},
		{"too mild", []Expect{churn}, []Finding{f("connection-churn", diag.Info, nginx)}, "miss", "reported as connection-churn at info"},
		{"other destination", []Expect{churn}, []Finding{f("connection-churn", diag.Warning, Subject{Command: "wrk", Remote: "127.0.0.1:8080"})}, "false alarm + miss", ""},
		{"owner not reported", []Expect{churn}, []Finding{f("connection-churn", diag.Warning, Subject{Remote: "127.0.0.1:8081"})}, "miss", "reported as connection-churn warning without command"},
		{"absent", []Expect{churn}, nil, "miss", "not reported"},
		{"extra rule", []Expect{churn}, []Finding{f("connection-churn", diag.Warning, nginx), f("port-exhaustion", diag.Warning, nginx)}, "false alarm", ""},
		{"optional allowed", []Expect{churn, {Rule: "time-wait-churn", Optional: true, Max: diag.Warning}},
			[]Finding{f("connection-churn", diag.Warning, nginx), f("time-wait-churn", diag.Warning, nginx)}, "pass", ""},
		{"optional above max", []Expect{churn, {Rule: "time-wait-churn", Optional: true, Max: diag.Warning}},
			[]Finding{f("connection-churn", diag.Warning, nginx), f("time-wait-churn", diag.Critical, nginx)}, "false alarm", ""},
		{"either rule", []Expect{{Rule: "rwnd-limited|sndbuf-limited", Min: diag.Warning}}, []Finding{f("sndbuf-limited", diag.Critical, nginx)}, "pass", ""},
		{"service", []Expect{leak}, []Finding{f("close-wait-leak", diag.Warning, Subject{Command: "python3", Service: "127.0.0.1:9000"})}, "pass", ""},
		{"service by local port", []Expect{leak}, []Finding{f("close-wait-leak", diag.Warning, Subject{Command: "python3", Local: "127.0.0.1:9000"})}, "pass", "matched on subject.local's port"},
		{"other service", []Expect{leak}, []Finding{f("close-wait-leak", diag.Warning, Subject{Command: "python3", Service: "127.0.0.1:9001"})}, "false alarm + miss", ""},
		{"no service", []Expect{leak}, []Finding{f("close-wait-leak", diag.Warning, Subject{Command: "python3", Remote: "127.0.0.1:5555"})}, "miss", ""},
		{"fix given", []Expect{capped}, []Finding{withFix(f("listen-overflow", diag.Critical, nginx), "", "events { worker_connections 2048; }")}, "pass", ""},
		{"fix in the text", []Expect{capped}, []Finding{withFix(f("listen-overflow", diag.Critical, nginx), "raise worker_connections", "")}, "pass", ""},
		{"fix missing", []Expect{capped}, []Finding{withFix(f("listen-overflow", diag.Critical, nginx), "listen 80 backlog=4096;", "")}, "miss",
			`listen-overflow critical without a fix saying "worker_connections"`},
	} {
		o := Judge(c.want, c.got)
		if o.Verdict() != c.verdict {
			t.Errorf("%s: %s, want %s (%+v)", c.name, o.Verdict(), c.verdict, o)
		}
		if all := strings.Join(append(o.Notes, o.Misses...), " "); c.note != "" && !strings.Contains(all, c.note) {
			t.Errorf("%s: notes and misses %q, want %q", c.name, all, c.note)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	rows := []Row{
		{Name: "a|b", Software: "s", Measured: []string{"1/s"}, Exit: []int{0}, Outcome: Judge(nil, nil)},
		{Name: "c", Want: []Expect{{Rule: "x", Min: diag.Warning}}, Exit: []int{0}, Outcome: Judge([]Expect{{Rule: "x", Min: diag.Warning}}, nil)},
		{Name: "d", Skipped: "wrk not installed"},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, "# T\n", rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`| 1 | a\|b | s | 1/s | quiet`, "| miss<br>miss: x warning or above: not reported |", "skipped: wrk not installed | not run |",
		"2 of 3 cases ran; 1 pass; false alarms in 0 (goal 0); misses in 1 (goal 0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
)

// fakeSource replays events, then the readings one per Read.
type fakeSource struct {
	events   []bpfsource.Event
	readings []*bpfsource.Reading
	reads    int
	missing  []bpfsource.Missing
	err      error
	// end closes the stream after the events, as Close does.
	end bool
}

func (f *fakeSource) Events(ctx context.Context) (<-chan bpfsource.Event, error) {
	if f.err != nil {
		return nil, f.err
	}
	ch := make(chan bpfsource.Event)
	go func() {
		defer close(ch)
		for _, e := range f.events {
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
		if !f.end {
			<-ctx.Done()
		}
	}()
	return ch, nil
}

func (f *fakeSource) Read() (*bpfsource.Reading, error) {
	i := f.reads
	f.reads++
	if i < len(f.readings) {
		return f.readings[i], nil
	}
	return &bpfsource.Reading{}, nil
}

func (f *fakeSource) Missing() []bpfsource.Missing { return f.missing }

var t0 = time.Date(2026, 11, 23, 9, 31, 2, 123e6, time.UTC)

func ev(kind bpfsource.EventKind, local, remote string, pid int, reason string) bpfsource.Event {
	e := bpfsource.Event{Time: t0, Kind: kind, Netns: 4026531840, Local: netip.MustParseAddrPort(local),
		Remote: netip.MustParseAddrPort(remote), Reason: reason, Pid: pid}
	if pid != 0 {
		e.Comm = "nginx"
	}
	return e
}

func run(t *testing.T, src Source, o Options) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out, notes bytes.Buffer
	o.Notes = &notes
	if o.NameOf == nil {
		o.NameOf = func(ino uint64) (string, bool) { return "host", ino == 4026531840 }
	}
	if err := Run(ctx, src, o, &out); err != nil {
		t.Fatal(err)
	}
	return out.String(), notes.String()
}

func TestTextFoldsRepeats(t *testing.T) {
	src := &fakeSource{events: []bpfsource.Event{
		ev(bpfsource.FailedConnect, "0.0.0.0:0", "198.18.0.2:8080", 812, "EADDRNOTAVAIL"),
		ev(bpfsource.FailedConnect, "0.0.0.0:0", "198.18.0.2:8080", 812, "EADDRNOTAVAIL"),
		ev(bpfsource.FailedConnect, "0.0.0.0:0", "198.18.0.2:8080", 812, "EADDRNOTAVAIL"),
		ev(bpfsource.ListenOverflow, "198.18.0.2:8080", "198.18.0.1:40001", 0, "TCP_LISTEN_OVERFLOW"),
		ev(bpfsource.ListenOverflow, "198.18.0.2:8080", "198.18.0.1:40002", 0, "TCP_LISTEN_OVERFLOW"),
	}, end: true}
	out, _ := run(t, src, Options{Tick: time.Hour})
	want := []string{
		"09:31:02.123 failed-connect   host      nginx/812         *:* > 198.18.0.2:8080                         EADDRNOTAVAIL",
		"09:31:02.123 listen-overflow  host      -                 198.18.0.2:8080 > 198.18.0.1:40001            TCP_LISTEN_OVERFLOW",
		"  ... and 2 more failed-connect of nginx/812 *:* > 198.18.0.2:8080 EADDRNOTAVAIL within 1h0m0s",
		"  ... and 1 more listen-overflow 198.18.0.2:8080 > 198.18.0.1:40001-40002 TCP_LISTEN_OVERFLOW within 1h0m0s",
	}
	if got := strings.Split(strings.TrimRight(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
}

// TestTextFoldsStorms: a storm of one kind from one process to one peer
// folds whatever its ports (SYN retransmits from 31 client ports, resets
// of refused connects), into one line and a count with the ports' range.
func TestTextFoldsStorms(t *testing.T) {
	var evs []bpfsource.Event
	for i := range 31 {
		evs = append(evs, ev(bpfsource.SynRetransmit, fmt.Sprintf("198.18.0.1:%d", 40001+i), "198.18.0.2:80", 900, ""))
	}
	for i := range 5 {
		evs = append(evs, ev(bpfsource.ResetReceived, fmt.Sprintf("198.18.0.1:%d", 41001+i), "198.18.0.3:81", 0, ""))
	}
	out, _ := run(t, &fakeSource{events: evs, end: true}, Options{Tick: time.Hour})
	want := []string{
		"09:31:02.123 syn-retransmit   host      nginx/900         198.18.0.1:40001 > 198.18.0.2:80              ",
		"09:31:02.123 reset-received   host      -                 198.18.0.1:41001 > 198.18.0.3:81              ",
		"  ... and 30 more syn-retransmit of nginx/900 198.18.0.1:40001-40031 > 198.18.0.2:80 within 1h0m0s",
		"  ... and 4 more reset-received 198.18.0.1:41001-41005 > 198.18.0.3:81 within 1h0m0s",
	}
	if got := strings.Split(strings.TrimRight(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
}

// TestTextLongNamesAligned: a long or escaped process name is cut to its
// column, so the endpoints start at the same place on every line.
func TestTextLongNamesAligned(t *testing.T) {
	short := ev(bpfsource.ResetSent, "198.18.0.1:5000", "198.18.0.2:80", 7, "")
	long := ev(bpfsource.ResetSent, "198.18.0.1:5001", "198.18.0.9:80", 1234567, "")
	long.Comm = "a-very-long-name\x1b"
	out, _ := run(t, &fakeSource{events: []bpfsource.Event{short, long}, end: true}, Options{Tick: time.Hour})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out)
	}
	at := func(l, s string) int { return utf8.RuneCountInString(l[:strings.Index(l, s)]) }
	if a, b := at(lines[0], "198.18.0.1:"), at(lines[1], "198.18.0.1:"); a != b {
		t.Errorf("endpoints at column %d and %d:\n%s", a, b, out)
	}
	if !strings.Contains(lines[1], "…/1234567") || strings.Contains(lines[1], "\x1b") {
		t.Errorf("long name not cut whole: %q", lines[1])
	}
}

func TestJSONEveryEvent(t *testing.T) {
	src := &fakeSource{events: []bpfsource.Event{
		ev(bpfsource.ResetSent, "198.18.0.1:0", "198.18.0.2:80", 77, "TCP_ABORT_ON_LINGER"),
		ev(bpfsource.ResetSent, "198.18.0.1:0", "198.18.0.2:80", 77, "TCP_ABORT_ON_LINGER"),
		ev(bpfsource.ResetReceived, "198.18.0.2:80", "198.18.0.1:5000", 0, ""),
	}}
	out, _ := run(t, src, Options{JSON: true, Count: 3})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out)
	}
	var first, last map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	if first["kind"] != "reset-sent" || first["pid"] != float64(77) || first["command"] != "nginx" ||
		first["local"] != "198.18.0.1:*" || first["reason"] != "TCP_ABORT_ON_LINGER" || first["netns"] != "host" ||
		first["time"] != "2026-11-23T09:31:02.123000Z" {
		t.Fatalf("first line %s", lines[0])
	}
	if last["pid"] != nil || last["command"] != nil || last["kind"] != "reset-received" {
		t.Fatalf("last line %s", lines[2])
	}
	if _, ok := last["reason"]; ok {
		t.Fatalf("empty reason printed: %s", lines[2])
	}
}

func TestFilter(t *testing.T) {
	evs := []bpfsource.Event{
		ev(bpfsource.FailedConnect, "0.0.0.0:0", "198.18.0.2:8080", 812, "EADDRNOTAVAIL"),
		ev(bpfsource.ResetSent, "198.18.0.1:0", "198.18.0.2:80", 77, "TCP_ABORT_ON_LINGER"),
		ev(bpfsource.SynRetransmit, "198.18.0.1:41000", "198.18.0.2:80", 0, ""),
	}
	for _, c := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"port", Filter{Port: 80}, []string{"reset-sent", "syn-retransmit"}},
		{"pid", Filter{Pid: 812}, []string{"failed-connect"}},
		{"kind", Filter{Kinds: map[string]bool{"syn-retransmit": true}}, []string{"syn-retransmit"}},
		{"netns", Filter{Netns: map[uint64]bool{1: true}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _ := run(t, &fakeSource{events: evs, end: true}, Options{JSON: true, Filter: c.f})
			var kinds []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var m map[string]any
				if l == "" {
					continue
				}
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, m["kind"].(string))
			}
			if strings.Join(kinds, ",") != strings.Join(c.want, ",") {
				t.Fatalf("kinds %v, want %v", kinds, c.want)
			}
		})
	}
}

func TestBurstsAndNotes(t *testing.T) {
	peer := netip.MustParseAddrPort("198.18.0.2:5201")
	src := &fakeSource{
		missing: []bpfsource.Missing{{Program: "kfree_skb", Reason: "refused"}},
		readings: []*bpfsource.Reading{
			{Retransmits: map[uint64][]bpfsource.Retransmit{1: {{Peer: peer, Count: 999}}}}, // before the stream: dropped
			{LostEvents: 7, Skipped: map[string]uint64{"inet_sock_set_state": 3}, Retransmits: map[uint64][]bpfsource.Retransmit{4026531840: {
				{Peer: peer, LocalPort: 40000, Count: 42},
				{Peer: netip.MustParseAddrPort("198.18.0.3:80"), Count: 3},
				{Peer: netip.MustParseAddrPort("198.18.0.4:80"), SYN: true, Count: 50},
			}}},
		},
	}
	out, notes := run(t, src, Options{Burst: 10, Tick: 20 * time.Millisecond, Count: 1, Now: func() time.Time { return t0 }})
	want := "09:31:02.123 retransmit-burst host      -                 *:40000 > 198.18.0.2:5201                     42 retransmits\n"
	if out != want {
		t.Fatalf("got %q\nwant %q", out, want)
	}
	for _, s := range []string{"not watching what kfree_skb sees: refused", "7 events lost", "runs of the program on inet_sock_set_state the kernel skipped in the last 20ms: 3"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}
}

func TestStreamError(t *testing.T) {
	err := Run(context.Background(), &fakeSource{err: errors.New("no event program loaded")}, Options{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no event program") {
		t.Fatalf("err = %v", err)
	}
}

func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:0":       "*:*",
		"198.18.0.1:0":    "198.18.0.1:*",
		"[::]:80":         "*:80",
		"[2001:db8::1]:5": "[2001:db8::1]:5",
	} {
		if got := endpoint(netip.MustParseAddrPort(in)); got != want {
			t.Errorf("endpoint(%s) = %s, want %s", in, got, want)
		}
	}
	if got := endpoint(netip.AddrPort{}); got != "*:*" {
		t.Errorf("zero endpoint = %s", got)
	}
}

// hostile is a process name any local user can set (prctl PR_SET_NAME),
// or a namespace name (a file under /run/netns): printed raw it retitles
// the window, clears the screen and starts a forged line.
const hostile = "\x1b]0;PWN\x07\x1b[2J\nX"

func TestTextEscapesNames(t *testing.T) {
	e := ev(bpfsource.ResetSent, "198.18.0.1:0", "198.18.0.2:80", 77, hostile)
	e.Comm = hostile
	src := func() *fakeSource {
		return &fakeSource{events: []bpfsource.Event{e, e}, end: true,
			missing: []bpfsource.Missing{{Program: hostile, Reason: hostile}}}
	}
	runNamed := func(o Options) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var out, notes bytes.Buffer
		o.Notes = &notes
		o.NameOf = func(uint64) (string, bool) { return hostile, true }
		if err := Run(ctx, src(), o, &out); err != nil {
			t.Fatal(err)
		}
		return out.String(), notes.String()
	}
	out, notes := runNamed(Options{Tick: time.Hour})
	const escaped = `\x1b]0;PWN\a\x1b[2J\nX`
	for _, c := range []struct {
		what, got string
		want      int
	}{{"lines", out, 4}, {"notes", notes, 2}} {
		if strings.ContainsAny(c.got, "\x1b\x07") {
			t.Errorf("%s: raw ESC or BEL: %q", c.what, c.got)
		}
		if n := strings.Count(c.got, escaped); n != c.want {
			t.Errorf("%s: %q appears %d times, want %d: %q", c.what, escaped, n, c.want, c.got)
		}
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "09:31:02.123 reset-sent") || !strings.HasPrefix(lines[1], "  ... and 1 more") {
		t.Errorf("want an event line and a repeat line, got %q", out)
	}
	// JSON escapes by its own rules: the names come back as they were.
	js, _ := runNamed(Options{JSON: true, Count: 1})
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	if m["command"] != hostile || m["netns"] != hostile || m["reason"] != hostile {
		t.Errorf("JSON changed the names: %s", js)
	}
}

// TestLineBytes pins both forms of a line with a process and one without,
// a named namespace and an unnamed one, byte for byte.
func TestLineBytes(t *testing.T) {
	named := func(ino uint64) (string, bool) { return "host", ino == 4026531840 }
	withPid := lineOf(ev(bpfsource.ResetSent, "198.18.0.1:0", "[2001:db8::2]:80", 77, "TCP_ABORT_ON_LINGER"))
	noPid := lineOf(ev(bpfsource.ResetReceived, "198.18.0.2:80", "198.18.0.1:5000", 0, ""))
	noPid.Netns = 4026532000
	zero := noPid
	zero.Netns = 0
	for _, c := range []struct {
		l        Line
		text, js string
	}{
		{withPid, "09:31:02.123 reset-sent       host      nginx/77          198.18.0.1:* > [2001:db8::2]:80               TCP_ABORT_ON_LINGER\n",
			`{"time":"2026-11-23T09:31:02.123000Z","kind":"reset-sent","netns":"host","netns_inode":4026531840,"pid":77,"command":"nginx","local":"198.18.0.1:*","remote":"[2001:db8::2]:80","reason":"TCP_ABORT_ON_LINGER","count":1}` + "\n"},
		{noPid, "09:31:02.123 reset-received   ns:4026532000 -                 198.18.0.2:80 > 198.18.0.1:5000               \n",
			`{"time":"2026-11-23T09:31:02.123000Z","kind":"reset-received","netns":"ns:4026532000","netns_inode":4026532000,"pid":null,"command":null,"local":"198.18.0.2:80","remote":"198.18.0.1:5000","count":1}` + "\n"},
		{zero, "09:31:02.123 reset-received   ?         -                 198.18.0.2:80 > 198.18.0.1:5000               \n",
			`{"time":"2026-11-23T09:31:02.123000Z","kind":"reset-received","netns":"?","netns_inode":0,"pid":null,"command":null,"local":"198.18.0.2:80","remote":"198.18.0.1:5000","count":1}` + "\n"},
	} {
		if got := string(appendText(nil, &c.l, named)); got != c.text {
			t.Errorf("text\n got %q\nwant %q", got, c.text)
		}
		if got := string(appendJSON(nil, &c.l, named)); got != c.js {
			t.Errorf("json\n got %s\nwant %s", got, c.js)
		}
	}
}

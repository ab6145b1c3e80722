// SPDX-License-Identifier: Apache-2.0

// Package rules holds every diagnosis rule, one file each. All returns
// them in a fixed order, sorted by id; the registry test checks that each
// has a unique id, a doc page and firing and quiet fixtures.
package rules

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"text/tabwriter"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// All returns every rule, sorted by id.
func All() []diag.Rule {
	rs := []diag.Rule{
		// One line per rule; keep this list explicit.
		closeWaitLeak(),
		fdExhaustion(),
		listenOverflow(),
		portExhaustion(),
		timeWaitChurn(),
		sndbufLimited(),
		rwndLimited(),
		slowReader(),
		retransmissions(),
		synQueueOverflow(),
		bufferLimits(),
		appConnectionCap(),
		connectionBottleneck(),
		connectionChurn(),
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	return rs
}

// ByID returns the rule with the given id.
func ByID(id string) (diag.Rule, bool) {
	for _, r := range All() {
		if r.ID == id {
			return r, true
		}
	}
	return diag.Rule{}, false
}

// IDs is every rule's id, in All's order.
func IDs() []string {
	var ids []string
	for _, r := range All() {
		ids = append(ids, r.ID)
	}
	return ids
}

// Select is the rules ids name, in that order; every rule for none. An
// id that names no rule is an error that says where to find the ids.
func Select(ids []string) ([]diag.Rule, error) {
	if len(ids) == 0 {
		return All(), nil
	}
	var rs []diag.Rule
	for _, id := range ids {
		r, ok := ByID(id)
		if !ok {
			return nil, fmt.Errorf("unknown rule %q (see tcpdoctor rules)", id)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// WriteList prints the rules as a table: id, whether it needs a window
// of two samples, title.
func WriteList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tNEEDS WINDOW\tTITLE")
	for _, r := range All() {
		win := "no"
		if r.NeedsDelta {
			win = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, win, r.Title)
	}
	return tw.Flush()
}

// What follows is the plumbing every rule shares: subjects, readiness of
// the inputs, and ordering and capping of findings. The TCP facts rules
// judge live in internal/tcpmodel, the fixes in internal/remedy.

// subject builds a finding subject for a socket: its first owner and,
// for a server-side socket, the service (listener) it belongs to.
func subject(s *snapshot.Snapshot, ls tcpmodel.Listeners, sk *snapshot.Socket) diag.Subject {
	sub := diag.Subject{Netns: s.Netns.Name, Local: diag.At(sk.Local.AddrPort())}
	if sk.State != snapshot.Listen {
		sub.Remote = diag.At(sk.Remote.AddrPort())
	}
	if ls != nil {
		sub.Service = diag.At(ls.Service(sk))
	}
	sub.Pid, sub.Command = tcpmodel.FirstOwner(s, sk)
	return sub
}

// sockdiagGone returns an unknown error when sock_diag failed and left
// no sockets to judge.
func sockdiagGone(s *snapshot.Snapshot) error {
	if msg, failed := s.Failed(snapshot.SourceSockdiag); failed && len(s.Sockets) == 0 {
		return diag.Unknownf("sock_diag failed: %s", msg)
	}
	return nil
}

// sockdiagReady returns an unknown error when sock_diag failed or gave no
// tcp_info for any established socket (so a rule cannot judge them).
func sockdiagReady(s *snapshot.Snapshot) error {
	if e, bad := s.Failed(snapshot.SourceSockdiag); bad {
		return diag.Unknownf("sock_diag failed: %s", e)
	}
	// The first established socket with a tcp_info settles it; all of
	// them are counted only for the message.
	est := 0
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Established {
			if s.Sockets[i].HasTCP() {
				return nil
			}
			est++
		}
	}
	if est > 0 {
		return diag.Unknownf("no tcp_info for any of %d established sockets", est)
	}
	return nil
}

// capFindings keeps the first n findings (already ordered worst first) and
// replaces the rest with one summary finding built by more(count).
func capFindings(fs []diag.Finding, n int, more func(int) diag.Finding) []diag.Finding {
	if len(fs) <= n {
		return fs
	}
	rest := len(fs) - n
	return append(fs[:n:n], more(rest))
}

// scored is a finding with a score that orders it among findings of the
// same severity.
type scored struct {
	f     diag.Finding
	score float64
}

// rankFindings orders hits by severity, then score, both descending and
// stable, and keeps the first n; the rest are summed up by more.
func rankFindings(hits []scored, n int, more func(int) diag.Finding) []diag.Finding {
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].f.Severity != hits[j].f.Severity {
			return hits[i].f.Severity > hits[j].f.Severity
		}
		return hits[i].score > hits[j].score
	})
	fs := make([]diag.Finding, len(hits))
	for i := range hits {
		fs[i] = hits[i].f
	}
	return capFindings(fs, n, more)
}

// moreFinding sums up n findings left out: "n more <what> <verb>".
func moreFinding(s *snapshot.Snapshot, n int, what, verb, source string) diag.Finding {
	return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: s.Netns.Name},
		Summary:  fmt.Sprintf("%d more %s %s", n, what, verb),
		Evidence: []diag.Evidence{{Name: what + " not shown", Value: fmt.Sprint(n), Source: source}},
		Fixes:    []diag.Fix{{Scope: "application", Text: "see the findings above; the same fix applies"}}}
}

// ownersNote is the evidence a finding carries when the processes behind
// it could not all be named, and why; ok is false when owners are whole.
func ownersNote(s *snapshot.Snapshot) (diag.Evidence, bool) {
	why := tcpmodel.OwnersMissing(s)
	if why == "" {
		return diag.Evidence{}, false
	}
	return diag.Evidence{Name: "owners", Value: "unknown for some sockets: " + why, Source: "/proc/PID/fd socket inodes"}, true
}

// peerRates is the path's rate to each peer measured over the window
// (tcpmodel.PathRatesOf, as trace measures it), computed once for the
// rules that judge a flow against its path; empty for one snapshot.
func peerRates(in *diag.Input) tcpmodel.PathRates {
	return diag.MemoOf(in, peerRatesOf{})
}

// peerRatesOf is peerRates' key.
type peerRatesOf struct{}

// Compute measures in.Cur's paths against the window's first sample.
func (peerRatesOf) Compute(in *diag.Input) tcpmodel.PathRates {
	if in.Prev == nil {
		return tcpmodel.PathRates{}
	}
	return tcpmodel.PathRatesOf(in.Cur, in.Window(), func(sk *snapshot.Socket) *snapshot.Socket { return prevAs(in, sk) })
}

// flowOpeners keeps the process holding most sockets of each flow in the
// window's first sample (tcpmodel.Openers), which a rule names when no
// socket of a flow has an owner now.
type flowOpeners struct{}

// Keep tallies s.
func (flowOpeners) Keep(s *snapshot.Snapshot) map[tcpmodel.Flow]int {
	return tcpmodel.Openers(s, tcpmodel.ListenersOf(s))
}

// prevOpener is the process that held most sockets of flow f in the
// previous sample (flowOpeners), 0 when none or without one.
func prevOpener(in *diag.Input, f tcpmodel.Flow) int {
	o, _ := diag.KeptOf(in, flowOpeners{})
	return o[f]
}

// prevState looks sockets up in the previous sample; nil without one.
func prevState(in *diag.Input) tcpmodel.PrevState {
	if in.Prev == nil {
		return nil
	}
	return func(sk *snapshot.Socket) (snapshot.State, bool) {
		if p := in.PrevOf(sk); p != nil {
			return p.State, true
		}
		return 0, false
	}
}

// ownersGone returns an unknown error when no process could be named at
// all (the owner scan failed or did not run) while sockets in the given
// states, the ones the rule judges, went unnamed: the rule still reports,
// by service and peer, and says why it cannot name processes.
func ownersGone(s *snapshot.Snapshot, states ...snapshot.State) error {
	why := tcpmodel.OwnersMissing(s)
	if why == "" || len(s.Procs) > 0 {
		return nil
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.Pids.Len() == 0 && slices.Contains(states, sk.State) {
			return diag.Unknownf("processes not named: %s", why)
		}
	}
	return nil
}

// prevTCP is sk's tcp_info in the previous sample (read into buf when
// packed), nil when it was not there, had none or without a sample.
func prevTCP(in *diag.Input, sk *snapshot.Socket, buf *snapshot.TCPInfo) *snapshot.TCPInfo {
	if p := in.PrevOf(sk); p != nil {
		return p.TCP(buf)
	}
	return nil
}

// prevAs is sk as the previous sample held it (snapshot.Was.As), nil
// when it was not there or without a previous sample.
func prevAs(in *diag.Input, sk *snapshot.Socket) *snapshot.Socket {
	p := in.PrevOf(sk)
	if p == nil {
		return nil
	}
	s := p.As(sk)
	return &s
}

// elsewhere is sk's other end when it lives in another namespace of this
// host collected with sk's (diag.Input.HostPeer: two pods on one node),
// described for the finding's subject; nil when it is not, or is in sk's
// own namespace (Tuples.Peer finds that one).
func elsewhere(in *diag.Input, sk *snapshot.Socket) (*snapshot.Snapshot, *snapshot.Socket, *diag.Peer) {
	if in.CurTuples().Peer(sk) != nil {
		return nil, nil, nil
	}
	s, p := in.HostPeer(sk)
	if p == nil {
		return nil, nil, nil
	}
	return s, p, diag.PeerOf(s, p)
}

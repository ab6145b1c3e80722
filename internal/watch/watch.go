// SPDX-License-Identifier: Apache-2.0

// Package watch streams the notable TCP events the eBPF source sees as
// they happen: failed connects (EADDRNOTAVAIL), resets sent and received,
// listen overflow drops, SYN retransmits, and retransmission bursts towards
// one peer. It is `tcpdoctor watch`: text for a person (repeats of one
// event folded into a count each tick), JSON lines for machines (every
// event).
package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// Source is what watch reads; *bpfsource.Source is one.
type Source interface {
	// Events streams the rare events until ctx is done.
	Events(ctx context.Context) (<-chan bpfsource.Event, error)
	// Read returns the counts since the previous Read.
	Read() (*bpfsource.Reading, error)
	// Missing lists the programs not running and why.
	Missing() []bpfsource.Missing
}

// BurstKind is the kind name of a retransmission burst line.
const BurstKind = "retransmit-burst"

// Kinds lists every kind a line can have, as --kind takes them.
func Kinds() []string {
	return []string{
		bpfsource.FailedConnect.String(), bpfsource.ResetSent.String(), bpfsource.ResetReceived.String(),
		bpfsource.ListenOverflow.String(), bpfsource.SynRetransmit.String(), BurstKind,
	}
}

// Filter keeps the lines that match every field set. The zero value keeps
// everything.
type Filter struct {
	// Port matches the local or the remote port.
	Port int
	// Pid matches the process the kernel ran the event for. Events seen in
	// interrupt or timer context (received resets, overflow drops,
	// retransmits) have no process: match them by Port.
	Pid int
	// Netns holds the namespace inodes to keep; nil keeps all.
	Netns map[uint64]bool
	// Kinds holds the kind names to keep; nil keeps all.
	Kinds map[string]bool
	// Workload, when set, keeps the lines whose Workload it accepts
	// (--pod, --container).
	Workload func(*snapshot.Workload) bool
}

// Options says how to watch.
type Options struct {
	Filter Filter
	// JSON prints one JSON object per line and per event.
	JSON bool
	// Tick is how often counters are read (bursts, lost events) and, in
	// text, repeats are summed up.
	Tick time.Duration
	// Burst is the retransmits towards one peer within one Tick that make
	// a burst line; 0 turns burst lines off.
	Burst uint64
	// Count stops after this many lines (0: no limit).
	Count int
	// NameOf names a namespace by inode ("host", `ip netns` names); nil
	// or false prints "ns:INODE".
	NameOf func(inode uint64) (string, bool)
	// WorkloadOf names, at the event's time, the pod, container or unit
	// of the process pid (0: none), else of the namespace with inode
	// netns; nil or a nil answer names none.
	WorkloadOf func(pid int, netns uint64) *snapshot.Workload
	// Now is the clock for burst lines.
	Now func() time.Time
	// Notes receives what a person should know that is not an event
	// (lost events, programs not running).
	Notes io.Writer
}

// Line is one line of output: an event, or a burst of retransmits.
type Line struct {
	Time    time.Time
	Kind    string
	Netns   uint64
	Pid     int
	Command string
	Local   netip.AddrPort
	Remote  netip.AddrPort
	Reason  string
	// Count is how many events the line stands for: 1 for an event, the
	// retransmits of a burst.
	Count uint64
	// Workload is the pod, container or unit of the process, else of the
	// namespace (Options.WorkloadOf); nil when unknown.
	Workload *snapshot.Workload
}

// keep reports whether the filter keeps l.
func (f *Filter) keep(l *Line) bool {
	if f.Kinds != nil && !f.Kinds[l.Kind] {
		return false
	}
	if f.Netns != nil && !f.Netns[l.Netns] {
		return false
	}
	if f.Pid != 0 && l.Pid != f.Pid {
		return false
	}
	if f.Port != 0 && int(l.Local.Port()) != f.Port && int(l.Remote.Port()) != f.Port {
		return false
	}
	if f.Workload != nil && !f.Workload(l.Workload) {
		return false
	}
	return true
}

// errEnough ends Run once Options.Count lines are out.
var errEnough = errors.New("watch: count reached")

// Run prints lines to w until ctx is done, the stream ends, or Count
// lines are out. It fails only when the stream cannot start or w fails.
func Run(ctx context.Context, src Source, o Options, w io.Writer) error {
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Notes == nil {
		o.Notes = io.Discard
	}
	for _, m := range src.Missing() {
		fmt.Fprintf(o.Notes, "note: not watching what %s sees: %s\n", textsafe.String(m.Program), textsafe.String(m.Reason))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := src.Events(ctx)
	if err != nil {
		return err
	}
	// The first Read empties what was counted before the stream started.
	if _, err := src.Read(); err != nil {
		fmt.Fprintf(o.Notes, "note: counters unreadable, no retransmission bursts: %s\n", textsafe.String(err.Error()))
	}
	out := newPrinter(w, o)
	tick := time.NewTicker(o.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out.flush()
		case e, ok := <-events:
			if !ok {
				return out.flush()
			}
			l := lineOf(e)
			if err := out.line(&l); err != nil {
				return quiet(err)
			}
		case <-tick.C:
			if err := out.tick(src); err != nil {
				return quiet(err)
			}
		}
	}
}

func quiet(err error) error {
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

func lineOf(e bpfsource.Event) Line {
	return Line{Time: e.Time, Kind: e.Kind.String(), Netns: e.Netns, Pid: e.Pid, Command: e.Comm,
		Local: e.Local, Remote: e.Remote, Reason: e.Reason, Count: 1}
}

// bursts returns one line per peer that got at least burst retransmits
// (SYN retransmits have lines of their own) in r, most first.
func bursts(r *bpfsource.Reading, burst uint64, now time.Time) []Line {
	if burst == 0 || r == nil {
		return nil
	}
	var out []Line
	for ns, rs := range r.Retransmits {
		for _, x := range rs {
			if x.SYN || x.Count < burst {
				continue
			}
			out = append(out, Line{Time: now, Kind: BurstKind, Netns: ns,
				Local:  netip.AddrPortFrom(netip.Addr{}, x.LocalPort),
				Remote: x.Peer, Count: x.Count})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Remote.String() < out[j].Remote.String()
	})
	return out
}

// foldKey is what makes two events repeats of one another in text: the
// kind, the process, the addresses at both ends and the reason, with the
// ports left out, so one storm (SYN retransmits or refused connects from
// many client ports, overflows from one client address) folds into one
// line and a count with the ports' range.
type foldKey struct {
	kind, reason, command string
	netns                 uint64
	pid                   int
	local, remote         netip.Addr
}

// folded is what a fold key saw after its first line this tick.
type folded struct {
	n        uint64
	first    Line
	lLo, lHi uint16 // local ports, the first line's included
	rLo, rHi uint16 // remote ports
}

func (f *folded) add(l *Line) {
	f.n++
	lp, rp := l.Local.Port(), l.Remote.Port()
	f.lLo, f.lHi = min(f.lLo, lp), max(f.lHi, lp)
	f.rLo, f.rHi = min(f.rLo, rp), max(f.rHi, rp)
}

type printer struct {
	w     io.Writer
	o     Options
	buf   []byte
	lines int
	// seen holds, per fold key, the events this tick after the first.
	seen  map[foldKey]*folded
	order []foldKey
}

func newPrinter(w io.Writer, o Options) *printer {
	return &printer{w: w, o: o, seen: map[foldKey]*folded{}}
}

func (p *printer) line(l *Line) error {
	if p.o.WorkloadOf != nil && l.Workload == nil {
		l.Workload = p.o.WorkloadOf(l.Pid, l.Netns)
	}
	if !p.o.Filter.keep(l) {
		return nil
	}
	if !p.o.JSON && l.Kind != BurstKind {
		k := foldKey{kind: l.Kind, reason: l.Reason, command: l.Command, netns: l.Netns, pid: l.Pid,
			local: l.Local.Addr(), remote: l.Remote.Addr()}
		if f, ok := p.seen[k]; ok {
			f.add(l)
			return nil
		}
		lp, rp := l.Local.Port(), l.Remote.Port()
		p.seen[k] = &folded{first: *l, lLo: lp, lHi: lp, rLo: rp, rHi: rp}
		p.order = append(p.order, k)
	}
	return p.emit(l)
}

func (p *printer) emit(l *Line) error {
	if p.o.JSON {
		p.buf = appendJSON(p.buf[:0], l, p.o.NameOf)
	} else {
		p.buf = appendText(p.buf[:0], l, p.o.NameOf)
	}
	if _, err := p.w.Write(p.buf); err != nil {
		return err
	}
	p.lines++
	if p.o.Count > 0 && p.lines >= p.o.Count {
		return errEnough
	}
	return nil
}

// tick reads the counters (bursts, lost events, skipped runs) and sums up
// the repeats.
func (p *printer) tick(src Source) error {
	now := p.o.Now()
	r, err := src.Read()
	if err != nil {
		fmt.Fprintf(p.o.Notes, "note: counters unreadable: %s\n", textsafe.String(err.Error()))
	}
	if r != nil && r.LostEvents > 0 {
		fmt.Fprintf(p.o.Notes, "note: %d events lost in the last %s (the kernel's ring was full; counters still hold them)\n",
			r.LostEvents, p.o.Tick)
	}
	if r != nil {
		for _, prog := range slices.Sorted(maps.Keys(r.Skipped)) {
			fmt.Fprintf(p.o.Notes, "note: runs of the program on %s the kernel skipped in the last %s: %d (it was running on that CPU when an interrupt brought another event): events it would have seen are missing, from the stream and the counters\n",
				textsafe.String(prog), p.o.Tick, r.Skipped[prog])
		}
	}
	if err := p.flush(); err != nil {
		return err
	}
	for _, b := range bursts(r, p.o.Burst, now) {
		if err := p.line(&b); err != nil {
			return err
		}
	}
	return nil
}

// flush prints, in text, how often each folded event repeated this tick:
//
//	... and 30 more syn-retransmit of curl/1234 198.18.0.1:40001-40031 > 198.18.0.2:80 within 1s
func (p *printer) flush() error {
	for _, k := range p.order {
		f := p.seen[k]
		if f.n == 0 || p.o.JSON {
			continue
		}
		sub := subjectOf(&f.first, p.o.NameOf)
		msg := "  ... and " + strconv.FormatUint(f.n, 10) + " more " + textsafe.String(k.kind)
		if sub.HasPid {
			msg += " of " + processCell(&sub, 40)
		}
		msg += " " + portRange(k.local, f.lLo, f.lHi) + " > " + portRange(k.remote, f.rLo, f.rHi)
		if k.reason != "" {
			msg += " " + textsafe.String(k.reason)
		}
		msg += " within " + p.o.Tick.String() + "\n"
		if _, err := io.WriteString(p.w, msg); err != nil {
			return err
		}
	}
	clear(p.seen)
	p.order = p.order[:0]
	return nil
}

// portRange is an address with the range of ports its events had, as
// endpoint prints one ("*" for none given).
func portRange(a netip.Addr, lo, hi uint16) string {
	s := endpoint(netip.AddrPortFrom(a, lo))
	if hi != lo {
		if lo == 0 {
			s = endpoint(netip.AddrPortFrom(a, hi))
			s += "(and *)"
		} else {
			s += "-" + strconv.Itoa(int(hi))
		}
	}
	return s
}

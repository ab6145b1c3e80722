// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/output/sockets"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

type socketsOpts struct {
	src      sourceOpts
	wl       workloadOpts
	at       atOpts
	bpf      bpfOpts
	interval time.Duration
	states   []string
	port     int
	lport    int
	rport    int
	pid      int
	json     jsonOpt
	noOwners bool
	locks    bool
}

func newSocketsCmd(e *Env) *cobra.Command {
	o := &socketsOpts{}
	cmd := &cobra.Command{
		Use:   "sockets",
		Short: "List TCP sockets with the figures diagnoses need (ss for people)",
		Long: `List TCP sockets: state, queues, RTT, congestion window, delivery rate, buffers and
owning process. With --interval, take two samples and show the share of the window each connection
was busy and what limited it (send buffer, receiver's window, congestion), from the kernel's
tcp_info chronographs. --pod and --container keep the sockets whose owner runs in that pod or
container (else whose namespace it holds), looking in every namespace unless --netns says which.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSockets(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	o.src.register(fs)
	o.wl.register(fs, "sockets")
	o.src.workload = &o.wl
	o.at.register(fs)
	o.bpf.register(fs)
	fs.DurationVar(&o.interval, "interval", 0, "take two samples this far apart and show limiter shares")
	fs.StringSliceVar(&o.states, "state", nil, "only these states (e.g. established,time-wait,listen)")
	fs.IntVar(&o.port, "port", 0, "only sockets with this local or remote port")
	fs.IntVar(&o.lport, "lport", 0, "only sockets with this local port")
	fs.IntVar(&o.rport, "rport", 0, "only sockets with this remote port")
	fs.IntVar(&o.pid, "pid", 0, "only sockets owned by this process")
	o.json.register(fs)
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (faster)")
	fs.BoolVar(&o.locks, "locks", false, "read every socket's buffer lock bits (SO_SNDBUF/SO_RCVBUF set by the application) with eBPF iter/tcp: the table's Pinned column, buf_lock in --json; loading the program costs tens of ms")
	return cmd
}

func runSockets(cmd *cobra.Command, e *Env, o *socketsOpts) error {
	flt, err := o.filter(e)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(e.Stdout, 64<<10)
	if o.src.from != "" {
		return listFile(e, o, flt, w)
	}
	return listLive(cmd, e, o, flt, w)
}

// filter checks the flags and returns the sockets they keep.
func (o *socketsOpts) filter(e *Env) (*collect.SocketFilter, error) {
	if err := o.at.resolve(e, &o.src, "sockets"); err != nil {
		return nil, err
	}
	if err := o.src.validate(); err != nil {
		return nil, err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return nil, err
	}
	if o.interval < 0 {
		return nil, usageErr("sockets: --interval must not be negative")
	}
	if o.pid != 0 && o.noOwners {
		return nil, usageErr("sockets: --pid needs owners; drop --no-owners")
	}
	if o.pid < 0 {
		return nil, usageErr("sockets: --pid %d: not a process id", o.pid)
	}
	if o.pid != 0 && o.wl.Set() {
		return nil, usageErr("sockets: --pod and --container choose the processes; leave out --pid")
	}
	o.src.pid = o.pid
	if o.wl.Container != "" && o.noOwners {
		return nil, usageErr("sockets: --container needs owners; drop --no-owners")
	}
	flt := &collect.SocketFilter{Port: o.port, LPort: o.lport, RPort: o.rport, Pid: o.pid}
	for _, p := range []int{o.port, o.lport, o.rport} {
		if p < 0 || p > 65535 {
			return nil, usageErr("sockets: port %d out of range", p)
		}
	}
	if len(o.states) > 0 {
		flt.States = map[snapshot.State]bool{}
		for _, name := range o.states {
			st, ok := snapshot.ParseState(name)
			if !ok {
				return nil, usageErr("sockets: unknown state %q (want %s)", name, strings.Join(stateNames(), ", "))
			}
			flt.States[st] = true
		}
	}
	return flt, nil
}

// listFile lists the sockets of a snapshot file.
func listFile(e *Env, o *socketsOpts, flt *collect.SocketFilter, w *bufio.Writer) error {
	ss, _, err := readSeries(e, o.src.from)
	if err != nil {
		return err
	}
	if ss, err = o.src.narrowSeries(ss); err != nil {
		return err
	}
	warnErrors(e, ss)
	keep := func(r *sockets.Row) bool { return flt.Match(r.Socket) && o.wl.Match(r.Subject.Workload) }
	rows, err := sockets.WriteWindows(w, windows(ss), keep, sockets.Options{JSON: o.json.on, Locks: o.locks})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	o.noneMatched(e, rows)
	return nil
}

// listLive lists the sockets of live namespaces as the dump streams them,
// with their limiters over --interval when given.
func listLive(cmd *cobra.Command, e *Env, o *socketsOpts, flt *collect.SocketFilter, w *bufio.Writer) error {
	// Connection events show only under an --interval table; lock bits
	// only in JSON, when asked (their program's load would double the
	// time of a plain listing).
	// The kernel's owner walk loads only where it pays (its load costs
	// more than the readlinks it saves on a host with few open files).
	bpf := o.bpf
	bpf.pidfd = bpf.pidfd && o.locks
	x, err := bpf.extras(e, &o.src, bpfload.Need{Events: o.interval > 0, Locks: o.locks, FilesLazily: true})
	if err != nil {
		return err
	}
	defer x.Close()
	nss, err := o.src.namespaces(e)
	var xe *exitError
	if errors.As(err, &xe) {
		return err
	}
	if err != nil {
		return usageErr("%v", err)
	}
	co := collect.Options{Owners: !o.noOwners, Workloads: e.workloads()}
	flt.Apply(&co)
	st := x.Streamer(co, e.Now)
	var first []*snapshot.Snapshot
	var prev *tcpmodel.Chronos
	if o.interval > 0 {
		if first, prev, err = o.firstSample(cmd, e, st, nss, flt); err != nil {
			return err
		}
	}
	heads, p, err := o.rows(e, st, nss, flt, prev, w)
	if err != nil {
		return err
	}
	ss := make([]series, len(heads))
	for i, s := range heads {
		ss[i] = series{Netns: s.Netns.Name, Snaps: []*snapshot.Snapshot{s}}
		if first != nil {
			ss[i].Snaps = []*snapshot.Snapshot{first[i], s}
		}
	}
	warnErrors(e, ss)
	if p.Rows() == 0 && window.NoDump(ss) {
		return collectErr(errors.New("nothing could be collected: " + window.FirstErrorText(ss)))
	}
	if err := p.Close(); err != nil {
		return err
	}
	if o.interval > 0 && !o.json.on {
		// Text tables: never after a JSON array.
		sockets.WriteEvents(w, windows(ss), sockets.EventFilter{Pid: flt.Pid, Ports: flt.Ports})
	}
	err = w.Flush()
	if err == nil {
		o.noneMatched(e, p.Rows())
	}
	return err
}

// rows streams the sockets of nss to a printer on w, those flt and
// --pod or --container keep, with their limiters since prev when given.
func (o *socketsOpts) rows(e *Env, st *collect.Streamer, nss []netns.NS, flt *collect.SocketFilter, prev *tcpmodel.Chronos, w *bufio.Writer) ([]*snapshot.Snapshot, *sockets.Printer, error) {
	po := sockets.Options{JSON: o.json.on, Netns: len(nss) > 1, Limited: o.interval > 0, Locks: o.locks}
	for _, ns := range nss {
		po.Workload = po.Workload || ns.Workload != nil
	}
	stream := func(fn func(*snapshot.Snapshot, *snapshot.Socket) error) ([]*snapshot.Snapshot, error) {
		return st.Stream(nss, fn)
	}
	keep := func(r *sockets.Row) bool { return o.wl.Match(r.Subject.Workload) }
	return sockets.WriteStream(w, stream, flt.Match, keep, prev, po)
}

// firstSample is the start of --interval's window: the chronographs of
// the sockets kept, then the wait for the second sample.
func (o *socketsOpts) firstSample(cmd *cobra.Command, e *Env, st *collect.Streamer, nss []netns.NS, flt *collect.SocketFilter) ([]*snapshot.Snapshot, *tcpmodel.Chronos, error) {
	prev := tcpmodel.NewChronos()
	first, err := st.Stream(nss, func(s *snapshot.Snapshot, sk *snapshot.Socket) error {
		if flt.Match(sk) && o.wl.Match(output.SocketSubject(&s.Netns, sk, s.Procs).Workload) {
			prev.Add(s, sk)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, s := range first {
		prev.Taken(s)
	}
	return first, prev, e.Sleep(cmd.Context(), o.interval)
}

// noneMatched says on stderr that the filters given kept no socket (the
// listing is then a header or [] alone, exit 0).
func (o *socketsOpts) noneMatched(e *Env, rows int) {
	if rows > 0 {
		return
	}
	var given []string
	for _, f := range []struct {
		name string
		set  bool
		val  any
	}{
		{"--pid", o.pid != 0, o.pid}, {"--port", o.port != 0, o.port}, {"--lport", o.lport != 0, o.lport},
		{"--rport", o.rport != 0, o.rport}, {"--state", len(o.states) > 0, strings.Join(o.states, ",")},
		{"--pod", o.wl.Pod != "", o.wl.Pod}, {"--container", o.wl.Container != "", o.wl.Container},
	} {
		if f.set {
			given = append(given, fmt.Sprintf("%s %v", f.name, f.val))
		}
	}
	if len(given) == 0 {
		e.progress("note: no TCP socket in %s", o.src.where())
		return
	}
	e.progress("note: no socket matched %s in %s", strings.Join(given, " "), o.src.where())
}

// windows is each namespace's samples as the listing prints them.
func windows(ss []series) []sockets.Window {
	ws := make([]sockets.Window, len(ss))
	for i, sr := range ss {
		prev, cur := sr.Window()
		ws[i] = sockets.Window{Netns: sr.Netns, Prev: prev, Cur: cur}
	}
	return ws
}

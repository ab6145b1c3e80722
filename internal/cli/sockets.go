package cli

import (
	"bufio"
	"errors"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

type socketsOpts struct {
	src      sourceOpts
	bpf      bpfOpts
	interval time.Duration
	states   []string
	port     int
	lport    int
	rport    int
	pid      int
	json     bool
	noOwners bool
	locks    bool
}

func newSocketsCmd(e *Env) *cobra.Command {
	o := &socketsOpts{}
	cmd := &cobra.Command{
		Use:   "sockets",
		Short: "List TCP sockets with the figures these diagnoses need (an ss for people)",
		Long: `List TCP sockets: state, queues, RTT, congestion window, delivery rate, buffers and
owning process. With --interval, take two samples and show the share of the window each connection
was busy and what limited it (send buffer, receiver's window, congestion), from the kernel's
tcp_info chronographs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSockets(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	o.src.register(fs)
	o.bpf.register(fs)
	fs.DurationVar(&o.interval, "interval", 0, "take two samples this far apart and show limiter shares")
	fs.StringSliceVar(&o.states, "state", nil, "only these states (e.g. established,time-wait,listen)")
	fs.IntVar(&o.port, "port", 0, "only sockets with this local or remote port")
	fs.IntVar(&o.lport, "lport", 0, "only sockets with this local port")
	fs.IntVar(&o.rport, "rport", 0, "only sockets with this remote port")
	fs.IntVar(&o.pid, "pid", 0, "only sockets owned by this process")
	fs.BoolVar(&o.json, "json", false, "print a JSON array")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (faster)")
	fs.BoolVar(&o.locks, "locks", false, "with --json: read every socket's buffer lock bits (SO_SNDBUF/SO_RCVBUF set by the application) with eBPF iter/tcp, as buf_lock; loading the program costs tens of ms")
	return cmd
}

// socketView is one row of `sockets --json`; fields only ever get added.
type socketView struct {
	Netns string `json:"netns"`
	// Pid and Command are the first owner; null when unknown.
	Pid     *int    `json:"pid"`
	Command *string `json:"command"`
	snapshot.Socket
	Shares *sharesView `json:"limited,omitempty"`
}

type sharesView struct {
	WindowMS   float64 `json:"window_ms"`
	Busy       float64 `json:"busy"`
	Sndbuf     float64 `json:"sndbuf"`
	Rwnd       float64 `json:"rwnd"`
	Congestion float64 `json:"congestion"`
}

type socketFilter struct {
	states             map[snapshot.State]bool
	port, lport, rport int
	pid                int
}

func (f *socketFilter) match(sk *snapshot.Socket) bool {
	if f.states != nil && !f.states[sk.State] {
		return false
	}
	if !f.ports(int(sk.Local.Port()), int(sk.Remote.Port())) {
		return false
	}
	if f.pid != 0 {
		found := false
		for _, p := range sk.Pids {
			found = found || p == f.pid
		}
		return found
	}
	return true
}

// ports tests a local and a remote port against --port, --lport and
// --rport (sockets and the eBPF events alike).
func (f *socketFilter) ports(lp, rp int) bool {
	return (f.port == 0 || lp == f.port || rp == f.port) &&
		(f.lport == 0 || lp == f.lport) && (f.rport == 0 || rp == f.rport)
}

// kernel returns the dump request that does f's state and port tests in
// the kernel (idiag_states and INET_DIAG bytecode), so rejected sockets
// are never copied out; match still runs on what comes back, so the
// result is match's either way.
func (f *socketFilter) kernel() (states uint32, kf *sockdiag.Filter) {
	for st := range f.states {
		states |= 1 << st
		switch st {
		case snapshot.Close:
			// Sockets only bound come as CLOSE but answer to this bit.
			states |= 1 << snapshot.BoundInactive
		case snapshot.SynRecv:
			states |= 1 << snapshot.NewSynRecv
		}
	}
	kf = &sockdiag.Filter{}
	if f.port != 0 {
		kf.Ports = []uint16{uint16(f.port)}
	}
	if f.lport != 0 {
		kf.LPorts = []uint16{uint16(f.lport)}
	}
	if f.rport != 0 {
		kf.RPorts = []uint16{uint16(f.rport)}
	}
	if kf.Empty() {
		kf = nil
	}
	return states, kf
}

func runSockets(cmd *cobra.Command, e *Env, o *socketsOpts) error {
	if err := o.src.validate(); err != nil {
		return err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return err
	}
	if o.interval < 0 {
		return usageErr("sockets: --interval must not be negative")
	}
	if o.locks && !o.json {
		return usageErr("sockets: --locks shows in --json output only")
	}
	if o.pid != 0 && o.noOwners {
		return usageErr("sockets: --pid needs owners; drop --no-owners")
	}
	flt := &socketFilter{port: o.port, lport: o.lport, rport: o.rport, pid: o.pid}
	for _, p := range []int{o.port, o.lport, o.rport} {
		if p < 0 || p > 65535 {
			return usageErr("sockets: port %d out of range", p)
		}
	}
	if len(o.states) > 0 {
		flt.states = map[snapshot.State]bool{}
		for _, name := range o.states {
			st, ok := snapshot.ParseState(name)
			if !ok {
				return usageErr("sockets: unknown state %q", name)
			}
			flt.states[st] = true
		}
	}
	w := bufio.NewWriterSize(e.Stdout, 64<<10)
	if o.src.from != "" {
		ss, _, err := readSeries(e, o.src.from)
		if err != nil {
			return err
		}
		warnErrors(e, ss)
		if err := printSeries(w, ss, flt, o.json); err != nil {
			return err
		}
		return w.Flush()
	}
	// Connection events show only under an --interval table; lock bits
	// only in JSON, when asked (their program's load would double the
	// time of a plain listing).
	// The kernel's owner walk loads only where it pays (its load costs
	// more than the readlinks it saves on a host with few open files).
	bpf := o.bpf
	bpf.pidfd = bpf.pidfd && o.locks
	x, err := bpf.extras(e, &o.src, collect.Need{Events: o.interval > 0, Locks: o.locks, FilesLazily: true})
	if err != nil {
		return err
	}
	defer x.Close()
	nss, err := o.src.namespaces(e)
	if err != nil {
		return usageErr("%v", err)
	}
	states, kf := flt.kernel()
	st := x.Streamer(collect.Options{Owners: !o.noOwners, States: states, Filter: kf}, e.Now)
	var first []*snapshot.Snapshot
	var prev *chronoIndex
	if o.interval > 0 {
		prev = &chronoIndex{byNS: map[string]map[uint64]chrono{}, taken: map[string]time.Time{}}
		first, err = st.Stream(nss, func(s *snapshot.Snapshot, sk *snapshot.Socket) error {
			if flt.match(sk) {
				prev.add(s, sk)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, s := range first {
			prev.taken[s.Netns.Name] = s.Taken
		}
		if err := e.Sleep(cmd.Context(), o.interval); err != nil {
			return err
		}
	}
	p := &socketPrinter{w: w, json: o.json, multiNS: len(nss) > 1, shares: o.interval > 0}
	var sh sharesView
	heads, err := st.Stream(nss, func(s *snapshot.Snapshot, sk *snapshot.Socket) error {
		if !flt.match(sk) {
			return nil
		}
		r := socketRow{netns: s.Netns.Name, sk: sk}
		r.owner(s.Procs)
		if prev != nil && prev.shares(s, sk, &sh) {
			r.shares = &sh
		}
		return p.row(&r)
	})
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
	if p.rows == 0 && noDump(heads) {
		return collectErr(errors.New("nothing could be collected: " + firstErrors(ss)))
	}
	if err := p.close(); err != nil {
		return err
	}
	if o.interval > 0 {
		printEvents(w, ss, flt)
	}
	return w.Flush()
}

// noDump is true when no namespace's dump succeeded.
func noDump(heads []*snapshot.Snapshot) bool {
	for _, s := range heads {
		ok := false
		for _, src := range s.Sources {
			ok = ok || (src.Source == snapshot.SourceSockdiag && src.OK)
		}
		if ok {
			return false
		}
	}
	return true
}

// owner sets the row's command from its first owner.
func (r *socketRow) owner(procs map[int]*snapshot.Proc) {
	if len(r.sk.Pids) == 0 {
		return
	}
	if p := procs[r.sk.Pids[0]]; p != nil {
		r.command, r.hasCommand = p.Command, true
	}
}

// chronoIndex is the first of two samples: per namespace and cookie only
// the chronographs the shares need, not copies of the sockets.
type chronoIndex struct {
	byNS  map[string]map[uint64]chrono
	taken map[string]time.Time
}

type chrono struct{ busy, rwnd, sndbuf uint64 }

func (c *chronoIndex) add(s *snapshot.Snapshot, sk *snapshot.Socket) {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if !ti.Has(snapshot.EndChrono) {
		return
	}
	m := c.byNS[s.Netns.Name]
	if m == nil {
		m = map[uint64]chrono{}
		c.byNS[s.Netns.Name] = m
	}
	m[sk.Cookie] = chrono{ti.BusyTime, ti.RwndLimited, ti.SndbufLimited}
}

// shares fills sh for sk from its first sample; false when there is none.
func (c *chronoIndex) shares(s *snapshot.Snapshot, sk *snapshot.Socket, sh *sharesView) bool {
	ch, ok := c.byNS[s.Netns.Name][sk.Cookie]
	if !ok {
		return false
	}
	prev := snapshot.TCPInfo{Len: snapshot.EndChrono, BusyTime: ch.busy, RwndLimited: ch.rwnd, SndbufLimited: ch.sndbuf}
	var tb snapshot.TCPInfo
	return sharesOf(&prev, sk.TCP(&tb), s.Taken.Sub(c.taken[s.Netns.Name]), sh)
}

func sharesOf(prev, cur *snapshot.TCPInfo, window time.Duration, v *sharesView) bool {
	sh, ok := snapshot.ChronoShares(prev, cur, window)
	if !ok {
		return false
	}
	*v = sharesView{
		WindowMS:   float64(sh.Window) / float64(time.Millisecond),
		Busy:       snapshot.Frac(sh.Busy, sh.Window),
		Sndbuf:     snapshot.Frac(sh.Sndbuf, sh.Busy),
		Rwnd:       snapshot.Frac(sh.Rwnd, sh.Busy),
		Congestion: snapshot.Frac(sh.Cwnd, sh.Busy),
	}
	return true
}

// printSeries prints the sockets of snapshots read from a file (already in
// memory): a first pass finds which columns the table needs.
func printSeries(w *bufio.Writer, ss []series, flt *socketFilter, asJSON bool) error {
	p := &socketPrinter{w: w, json: asJSON}
	first := ""
	each := func(fn func(*socketRow) error) error {
		var sh sharesView
		for _, sr := range ss {
			prev, cur := sr.Window()
			var prevBy map[uint64]*snapshot.Socket
			if prev != nil {
				prevBy = make(map[uint64]*snapshot.Socket, len(prev.Sockets))
				for i := range prev.Sockets {
					prevBy[prev.Sockets[i].Cookie] = &prev.Sockets[i]
				}
			}
			var tb, pb snapshot.TCPInfo
			for i := range cur.Sockets {
				sk := &cur.Sockets[i]
				if !flt.match(sk) {
					continue
				}
				r := socketRow{netns: cur.Netns.Name, sk: sk}
				r.owner(cur.Procs)
				if ps := prevBy[sk.Cookie]; ps != nil && sharesOf(ps.TCP(&pb), sk.TCP(&tb), cur.Taken.Sub(prev.Taken), &sh) {
					r.shares = &sh
				}
				if err := fn(&r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if !asJSON {
		_ = each(func(r *socketRow) error {
			if first == "" {
				first = r.netns
			}
			p.multiNS = p.multiNS || r.netns != first
			p.shares = p.shares || r.shares != nil
			return nil
		})
	}
	if err := each(p.row); err != nil {
		return err
	}
	return p.close()
}

// socketPrinter prints rows as they come: a JSON array, one object a
// line, or a table whose widths come from its first rows.
type socketPrinter struct {
	w               *bufio.Writer
	json            bool
	multiNS, shares bool
	rows            int
	buf             []byte
	tab             *table
}

func (p *socketPrinter) row(r *socketRow) error {
	p.rows++
	if p.json {
		p.buf = p.buf[:0]
		if p.rows == 1 {
			p.buf = append(p.buf, "[\n"...)
		} else {
			p.buf = append(p.buf, ",\n"...)
		}
		p.buf = appendSocketJSON(p.buf, r)
		_, err := p.w.Write(p.buf)
		return err
	}
	if p.tab == nil {
		if err := p.header(); err != nil {
			return err
		}
	}
	t := p.tab
	sk := r.sk
	if p.multiNS {
		t.row = append(t.row, textsafe.String(r.netns)...)
		t.cell()
	}
	t.row = append(t.row, sk.State.String()...)
	t.cell()
	t.row = strconv.AppendUint(t.row, uint64(sk.RecvQ), 10)
	t.cell()
	t.row = strconv.AppendUint(t.row, uint64(sk.SendQ), 10)
	t.cell()
	t.row = appendAddrPort(t.row, sk.Local)
	t.cell()
	if sk.State == snapshot.Listen {
		t.row = append(t.row, '*')
	} else {
		t.row = appendAddrPort(t.row, sk.Remote)
	}
	t.cell()
	var tb snapshot.TCPInfo
	if in := sk.TCP(&tb); in != nil && sk.State != snapshot.Listen {
		t.row = appendMS(t.row, in.RTT)
		t.cell()
		t.row = strconv.AppendUint(t.row, uint64(in.SndCwnd), 10)
		t.cell()
		t.row = appendBps(t.row, in.DeliveryRate)
		t.cell()
	} else {
		t.dashes(3)
	}
	if m := sk.Mem; m != nil {
		t.row = appendSize(t.row, m.Sndbuf)
		t.cell()
		t.row = appendSize(t.row, m.Rcvbuf)
		t.cell()
	} else {
		t.dashes(2)
	}
	if len(sk.Pids) > 0 {
		if r.hasCommand {
			t.row = append(t.row, textsafe.String(r.command)...)
		} else {
			t.row = append(t.row, '?')
		}
		t.row = append(t.row, '/')
		t.row = strconv.AppendInt(t.row, int64(sk.Pids[0]), 10)
	} else {
		t.row = append(t.row, '-')
	}
	t.cell()
	if p.shares {
		if s := r.shares; s != nil {
			for _, v := range []float64{s.Busy, s.Sndbuf, s.Rwnd, s.Congestion} {
				t.row = strconv.AppendFloat(t.row, v*100, 'f', 0, 64)
				t.row = append(t.row, '%')
				t.cell()
			}
		} else {
			t.dashes(4)
		}
	}
	return t.endRow()
}

// dashes adds n cells holding "-".
func (t *table) dashes(n int) {
	for range n {
		t.row = append(t.row, '-')
		t.cell()
	}
}

func (p *socketPrinter) header() error {
	p.tab = newTable(p.w)
	var cols []string
	if p.multiNS {
		cols = append(cols, "Netns")
	}
	cols = append(cols, "State", "Recv-Q", "Send-Q", "Local", "Remote", "RTT", "Cwnd", "Rate", "Sndbuf", "Rcvbuf", "Process")
	if p.shares {
		cols = append(cols, "Busy", "Sndbuf-lim", "Rwnd-lim", "Cwnd-lim")
	}
	for _, c := range cols {
		p.tab.row = append(p.tab.row, c...)
		p.tab.cell()
	}
	return p.tab.endRow()
}

// close ends the array or prints the rows the table still holds (the
// header alone when there were no rows).
func (p *socketPrinter) close() error {
	if p.json {
		end := "\n]\n"
		if p.rows == 0 {
			end = "[]\n"
		}
		_, err := p.w.WriteString(end)
		return err
	}
	if p.tab == nil {
		if err := p.header(); err != nil {
			return err
		}
	}
	return p.tab.flush()
}

// appendAddrPort appends what AddrPort.String gives, escaped when it has
// a zone (from a file, a zone can be anything).
func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	if !ap.Addr().IsValid() || ap.Addr().Zone() != "" {
		return append(b, textsafe.String(ap.String())...)
	}
	return ap.AppendTo(b)
}

func appendMS(b []byte, us uint32) []byte {
	return append(strconv.AppendFloat(b, float64(us)/1000, 'f', 1, 64), "ms"...)
}

func appendBps(b []byte, bytesPerSec uint64) []byte {
	bits := float64(bytesPerSec) * 8
	switch {
	case bits >= 1e9:
		return append(strconv.AppendFloat(b, bits/1e9, 'f', 2, 64), "Gbps"...)
	case bits >= 1e6:
		return append(strconv.AppendFloat(b, bits/1e6, 'f', 1, 64), "Mbps"...)
	case bits >= 1e3:
		return append(strconv.AppendFloat(b, bits/1e3, 'f', 0, 64), "kbps"...)
	}
	return append(strconv.AppendFloat(b, bits, 'f', 0, 64), "bps"...)
}

func appendSize(b []byte, v uint32) []byte {
	switch {
	case v >= 1<<20 && v%(1<<20) == 0:
		return append(strconv.AppendUint(b, uint64(v>>20), 10), 'M')
	case v >= 1<<10 && v%(1<<10) == 0:
		return append(strconv.AppendUint(b, uint64(v>>10), 10), 'K')
	case v >= 1<<10:
		return append(strconv.AppendFloat(b, float64(v)/1024, 'f', 1, 64), 'K')
	}
	return strconv.AppendUint(b, uint64(v), 10)
}

func fmtBps(bytesPerSec uint64) string { return string(appendBps(nil, bytesPerSec)) }

func fmtSize(b uint32) string { return string(appendSize(nil, b)) }

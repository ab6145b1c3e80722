// SPDX-License-Identifier: Apache-2.0

// Package bench holds the measurements behind docs/performance.md:
// collection against ss (Collection) and the exporter (Exporter), both at
// N connections held by child processes in a lab topology's server
// namespace. The link emulator's own bench is linkemu.Bench. Callers
// parse flags and print the results.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// MaxConns bounds the connections a bench opens (1,200,000 sockets).
const MaxConns = 600000

// PerHolder keeps each holder process under a 20,000 fd hard limit, which
// a root without CAP_SYS_RESOURCE cannot raise.
const PerHolder = 9000

// Self is how a bench starts its child processes: the argv prefixes that
// make our executable hold connections or collect once in a namespace
// (the namespace name and the count are appended).
type Self struct {
	// Hold is followed by NS and --conns N: open N connections, print
	// "ready", hold them until killed (Hold).
	Hold []string
	// Once is followed by NS: collect once with owners and print
	// {"Sockets":N} (CollectOnce).
	Once []string
	// Stderr receives the children's stderr.
	Stderr io.Writer
}

// CollectionOptions configure Collection.
type CollectionOptions struct {
	Conns    int // established connections (two sockets each)
	Runs     int // timed runs of each contender; the median is reported
	ProcRoot string
	Self     Self
	Progress io.Writer
	// Split also times the listing's dump (collect.Streamer, no owners)
	// whole and in two halves at once (collect.Options.SplitMin), for
	// where a split pays.
	Split bool
}

// CollectionResult is what Collection measured.
type CollectionResult struct {
	// Netns is the namespace that held the connections (removed by now).
	Netns          string
	Sockets, Conns int
	Kernel         string
	Runs           int
	// Medians of Runs runs: our collection and ss, without and with
	// process owners.
	Ours, SS, OursOwners, SSOwners time.Duration
	// PeakRSS is the peak resident memory of a fresh process collecting
	// once with owners, in bytes.
	PeakRSS int64
	// Whole and Split, with CollectionOptions.Split, are the medians of
	// the listing's dump in one piece and in two halves at once.
	Whole, Split time.Duration
}

// Collection times our collection against ss -tinm (and, with owners,
// ss -tinmp) on o.Conns connections, and a fresh collector's peak RSS.
func Collection(ctx context.Context, o CollectionOptions) (*CollectionResult, error) {
	if o.Conns < 1 || o.Conns > MaxConns || o.Runs < 1 || o.Runs > 50 {
		return nil, fmt.Errorf("bench: --conns 1..%d, --runs 1..50", MaxConns)
	}
	sp, err := newSpace(ctx, o.Self, o.Conns, o.Progress)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	res := &CollectionResult{Netns: sp.name, Conns: o.Conns, Kernel: collect.KernelRelease(), Runs: o.Runs}
	plain := &collect.Collector{Opts: collect.Options{ProcRoot: o.ProcRoot}, Now: time.Now}
	owned := &collect.Collector{Opts: collect.Options{Owners: true, ProcRoot: o.ProcRoot}, Now: time.Now}
	nss := []netns.NS{sp.ns}
	if res.Ours, err = median(o.Runs, func() error {
		s := plain.Collect(nss)[0]
		res.Sockets = len(s.Sockets)
		if len(s.Errors) > 0 {
			return fmt.Errorf("bench: %s: %s", s.Errors[0].Source, s.Errors[0].Err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if res.OursOwners, err = median(o.Runs, func() error { owned.Collect(nss); return nil }); err != nil {
		return nil, err
	}
	ss := func(args ...string) func() error {
		return func() error {
			return netns.Do(sp.ns, func() error { return exec.Command("ss", args...).Run() })
		}
	}
	if o.Split {
		if res.Whole, res.Split, err = splitDumps(o, nss); err != nil {
			return nil, err
		}
	}
	if res.SS, err = median(o.Runs, ss("-tinm")); err != nil {
		return nil, fmt.Errorf("bench: ss -tinm: %w", err)
	}
	if res.SSOwners, err = median(o.Runs, ss("-tinmp")); err != nil {
		return nil, fmt.Errorf("bench: ss -tinmp: %w", err)
	}
	once := exec.Command(o.Self.Once[0], append(o.Self.Once[1:], sp.name)...)
	once.Stderr = o.Self.Stderr
	out, err := once.Output()
	if err != nil {
		return nil, fmt.Errorf("bench: child collector: %w", err)
	}
	var r struct{ Sockets int }
	if err := json.Unmarshal(out, &r); err != nil || r.Sockets == 0 {
		return nil, fmt.Errorf("bench: child collected nothing: %s", out)
	}
	if res.PeakRSS, err = maxRSS(once.ProcessState); err != nil {
		return nil, err
	}
	return res, nil
}

// splitDumps times the listing's dump of nss, without owners, whole and
// split in two halves whatever the namespace's size.
func splitDumps(o CollectionOptions, nss []netns.NS) (whole, split time.Duration, err error) {
	dump := func(splitMin int) func() error {
		st := &collect.Streamer{Opts: collect.Options{ProcRoot: o.ProcRoot, SplitMin: splitMin}, Now: time.Now}
		return func() error {
			_, err := st.Stream(nss, func(*snapshot.Snapshot, *snapshot.Socket) error { return nil })
			return err
		}
	}
	if whole, err = median(o.Runs, dump(-1)); err != nil {
		return 0, 0, fmt.Errorf("bench: whole dump: %w", err)
	}
	if split, err = median(o.Runs, dump(1)); err != nil {
		return 0, 0, fmt.Errorf("bench: split dump: %w", err)
	}
	return whole, split, nil
}

// median runs f n times (after a GC each) and returns the median time.
func median(n int, f func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		runtime.GC()
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// CollectOnce collects once with owners in namespace name and writes
// {"Sockets":N} to out: the child whose peak RSS Collection reports.
func CollectOnce(name, procRoot string, out io.Writer) error {
	ns, err := netns.Default().Named(name)
	if err != nil {
		return err
	}
	c := &collect.Collector{Opts: collect.Options{Owners: true, ProcRoot: procRoot}, Now: time.Now}
	s := c.Collect([]netns.NS{ns})[0]
	return json.NewEncoder(out).Encode(map[string]int{"Sockets": len(s.Sockets)})
}

// Hold runs in a holder child: it opens conns connections to a listener
// of its own in namespace name, writes "ready" to out, and holds them
// until ctx ends, in reaches EOF (the bench that started it closed the
// pipe or died), or MaxHold has passed.
func Hold(ctx context.Context, name string, conns int, in io.Reader, out io.Writer) error {
	if conns < 1 || conns > PerHolder {
		return fmt.Errorf("bench: a holder takes 1..%d connections", PerHolder)
	}
	ns, err := netns.Default().Named(name)
	if err != nil {
		return err
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	err = netns.Do(ns, func() error {
		l, sa, err := loopbackListener(4096, &fds)
		if err != nil {
			return err
		}
		for i := range conns {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("bench: socket %d: %w", i, err)
			}
			fds = append(fds, c)
			if err := unix.Connect(c, sa); err != nil {
				return fmt.Errorf("bench: connect %d: %w", i, err)
			}
			a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
			if err != nil {
				return fmt.Errorf("bench: accept %d: %w", i, err)
			}
			fds = append(fds, a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(eof)
	}()
	t := time.NewTimer(MaxHold)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-eof:
	case <-t.C:
	}
	return nil
}

// MaxHold bounds how long a holder keeps its connections if nobody
// closes its stdin.
const MaxHold = 2 * time.Hour

// space is a lab topology whose server namespace holds the connections.
// `lab clean` removes it if the bench is killed; the holders exit when
// their stdin closes, so they do not outlive the bench either.
type space struct {
	topo    *topo.Topo
	name    string
	ns      netns.NS
	self    Self
	conns   int
	holders []holder
}

// holder is one child holding connections; closing stdin ends it.
type holder struct {
	cmd   *exec.Cmd
	stdin io.Closer
}

// newSpace builds the topology and starts holders for conns connections
// in its server namespace; it cleans up itself on error.
func newSpace(ctx context.Context, self Self, conns int, progress io.Writer) (_ *space, err error) {
	sp, err := emptySpace(self)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		fmt.Fprintf(progress, "tcpdoctor: bench: opening %d connections in netns %s...\n", conns, sp.name)
	}
	if err := sp.grow(ctx, conns, 1); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// emptySpace builds the topology with no connections yet.
func emptySpace(self Self) (*space, error) {
	t, err := topo.Build(topo.Config{})
	if err != nil {
		return nil, err
	}
	sp := &space{topo: t, name: t.Server, self: self}
	if sp.ns, err = netns.Default().Named(sp.name); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// grow starts holders until the namespace holds conns connections,
// parallel holders connecting at a time. On error the holders started
// so far stay in sp.holders for close.
func (sp *space) grow(ctx context.Context, conns, parallel int) error {
	for sp.conns < conns {
		var batch []*bufio.Reader
		var sizes []int
		for len(batch) < max(parallel, 1) && sp.conns+sum(sizes) < conns {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(conns-sp.conns-sum(sizes), PerHolder)
			c := exec.Command(sp.self.Hold[0], append(sp.self.Hold[1:], sp.name, "--conns", strconv.Itoa(k))...)
			c.Stderr = sp.self.Stderr
			in, err := c.StdinPipe()
			if err != nil {
				return err
			}
			out, err := c.StdoutPipe()
			if err != nil {
				return err
			}
			if err := c.Start(); err != nil {
				return fmt.Errorf("bench: start holder: %w", err)
			}
			sp.holders = append(sp.holders, holder{cmd: c, stdin: in})
			batch = append(batch, bufio.NewReader(out))
			sizes = append(sizes, k)
		}
		for i, br := range batch {
			line, err := br.ReadString('\n')
			if err == nil && !strings.HasPrefix(line, "ready") {
				err = errors.New("no ready line")
			}
			if err != nil {
				return fmt.Errorf("bench: holder failed: %q: %w", line, err)
			}
			sp.conns += sizes[i]
		}
	}
	return nil
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// close ends the holders (by pid: they are our children) and removes the
// topology.
func (sp *space) close() {
	// All killed first: the kernel tears their sockets down in parallel.
	for _, h := range sp.holders {
		_ = h.stdin.Close()
		_ = h.cmd.Process.Kill()
	}
	for _, h := range sp.holders {
		_ = h.cmd.Wait()
	}
	_ = sp.topo.Close()
}

// maxRSS is an ended child's peak resident memory in bytes, from the
// kernel's rusage.
func maxRSS(ps interface{ SysUsage() any }) (int64, error) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, errors.New("bench: no rusage for the child")
	}
	return ru.Maxrss * 1024, nil
}

// loopbackListener listens on 127.0.0.1 (any port) in the calling
// thread's namespace with backlog; its fd is added to fds (closed by the
// caller, also on error).
func loopbackListener(backlog int, fds *[]int) (int, unix.Sockaddr, error) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	*fds = append(*fds, l)
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, nil, err
	}
	if err := unix.Listen(l, backlog); err != nil {
		return 0, nil, err
	}
	sa, err := unix.Getsockname(l)
	return l, sa, err
}

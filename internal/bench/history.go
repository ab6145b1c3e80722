// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// HistoryOptions configure History.
type HistoryOptions struct {
	Conns   int // established connections (two sockets each)
	Windows int // windows recorded per case
	// Dir is where the stores are written (one directory per case).
	Dir      string
	Self     Self
	Progress io.Writer
}

// HistoryCase is what keeping history cost over Windows real windows.
type HistoryCase struct {
	Name     string
	Sockets  int
	Windows  int
	Evidence int // evidence files written
	// Bytes are the store's bytes after the windows; TimelineBytes the
	// timeline segments' alone.
	Bytes, TimelineBytes int64
	// CPU is the process CPU time (user + system) the Recorder took for
	// the windows that kept evidence (EvidenceCPU) and for the others
	// (PlainCPU, over PlainWindows): Add and its writer, measured with
	// nothing else running in this process.
	EvidenceCPU, PlainCPU time.Duration
	PlainWindows          int
	// Findings is the warnings and above of the last window.
	Findings int
}

// HistoryResult is History's measurement.
type HistoryResult struct {
	Kernel string
	Cases  []HistoryCase
}

// History measures serve --history's own cost on a namespace of o.Conns
// real connections: each case collects o.Windows windows back to back as
// serve's loop does (collection, then report.Windows), and times only what
// the Recorder adds (its Add and the writer it waits for). "quiet" has no
// finding; "warning" adds a listener whose accept queue stays full (a
// listen-overflow warning persisting every window) with evidence kept
// every window, so that the cost of one evidence file is measured.
func History(ctx context.Context, o HistoryOptions) (*HistoryResult, error) {
	if o.Conns < 1 || o.Conns > MaxConns || o.Windows < 2 || o.Windows > 1000 {
		return nil, fmt.Errorf("history bench: --conns 1..%d, --cycles 2..1000", MaxConns)
	}
	sp, err := newSpace(ctx, o.Self, o.Conns, o.Progress)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	res := &HistoryResult{Kernel: collect.KernelRelease()}
	c := &collect.Collector{Opts: collect.Options{ProcRoot: "/proc", Owners: true}, Now: time.Now}
	for _, name := range []string{"quiet", "warning"} {
		if name == "warning" {
			closeFull, err := fullListener(sp.ns)
			if err != nil {
				return nil, err
			}
			defer closeFull()
		}
		hc, err := historyCase(ctx, c, sp.ns, name, o)
		if err != nil {
			return nil, err
		}
		res.Cases = append(res.Cases, *hc)
	}
	return res, nil
}

func historyCase(ctx context.Context, c *collect.Collector, ns netns.NS, name string, o HistoryOptions) (*HistoryCase, error) {
	dir := filepath.Join(o.Dir, name)
	opts := history.Options{Dir: dir, Tool: "tcpdoctor-lab bench"}
	if name == "warning" {
		// Evidence every window, unpaced: the cost of one file, measured
		// o.Windows times. The per-day figures apply the default pace.
		opts.EvidenceEvery, opts.MaxBytes = time.Nanosecond, 1<<50
	}
	w := report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
	r := history.New(opts)
	hc := &HistoryCase{Name: name}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "tcpdoctor: bench: history %s: %d windows...\n", name, o.Windows)
	}
	for i := range o.Windows + 1 {
		if err := ctx.Err(); err != nil {
			r.Close()
			return nil, err
		}
		snaps := c.Collect([]netns.NS{ns})
		rep := w.Report(snaps)
		before := cpuTime()
		r.Add(snaps, rep)
		r.Sync()
		took := cpuTime() - before
		if i > 0 { // the first collection has no window
			hc.Windows++
			if n := countEvidence(dir); n > hc.Evidence {
				hc.Evidence = n
				hc.EvidenceCPU += took
			} else {
				hc.PlainCPU += took
				hc.PlainWindows++
			}
		}
		hc.Sockets = len(snaps[0].Sockets)
		hc.Findings = warnings(rep)
	}
	r.Close()
	if r.Errors() > 0 {
		return nil, fmt.Errorf("history bench: %d write errors in %s", r.Errors(), dir)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		hc.Bytes += fi.Size()
		if strings.HasPrefix(de.Name(), "timeline-") {
			hc.TimelineBytes += fi.Size()
		}
	}
	return hc, nil
}

// countEvidence counts the evidence files in dir.
func countEvidence(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "evidence-*"))
	return len(m)
}

// warnings counts findings at warning or above.
func warnings(rep *report.Report) int {
	n := 0
	if rep != nil {
		for _, f := range rep.Findings {
			if f.Severity >= diag.Warning {
				n++
			}
		}
	}
	return n
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fullListener opens in ns a listener with backlog 8 that never accepts
// and 9 connections to it: its accept queue stays full (9/8) with no
// further overflow, a listen-overflow warning in every window.
func fullListener(ns netns.NS) (closeAll func(), err error) {
	var fds []int
	closeAll = func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
	err = netns.Do(ns, func() error {
		_, sa, err := loopbackListener(8, &fds)
		if err != nil {
			return err
		}
		for range 9 {
			s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, s)
			if err := unix.Connect(s, sa); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("history bench: full listener: %w", err)
	}
	time.Sleep(100 * time.Millisecond) // the handshakes complete
	return closeAll, nil
}

// HistoryWeek writes a week of serve's timeline into dir as serve would
// at interval: one namespace, its window every interval, a warning
// (listen-overflow, like the bench's full listener) persisting all week
// and so its evidence every 5 minutes (samples without sockets: the
// listing reads only their names). It returns the windows written.
func HistoryWeek(dir string, interval time.Duration) (int, error) {
	t0 := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	n := int(7 * 24 * time.Hour / interval)
	r := history.New(history.Options{Dir: dir, MaxBytes: 1 << 40, MaxAge: 1 << 62, Tool: "tcpdoctor-lab bench", Now: func() time.Time { return t0.Add(7 * 24 * time.Hour) }})
	f := diag.Finding{Rule: "listen-overflow", Severity: diag.Warning,
		Subject: diag.Subject{Netns: "host", Local: diag.At(netip.MustParseAddrPort("127.0.0.1:8080")), Pid: 4242, Command: "java"},
		Summary: "listener :8080 (java pid 4242) has a full accept queue: 9/8, backlog 8 is the application's own (somaxconn 4096)"}
	for i := range n + 1 {
		s := &snapshot.Snapshot{Netns: snapshot.Netns{Name: "host", Inode: 1}, Taken: t0.Add(time.Duration(i) * interval), Host: "bench"}
		r.Add([]*snapshot.Snapshot{s}, &report.Report{Findings: []diag.Finding{f}})
		r.Sync()
	}
	r.Close()
	if r.Errors() > 0 {
		return 0, fmt.Errorf("history bench: %d write errors in %s", r.Errors(), dir)
	}
	return n, nil
}

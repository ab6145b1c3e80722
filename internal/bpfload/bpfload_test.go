// SPDX-License-Identifier: Apache-2.0

package bpfload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// failing are loaders that all refuse with err, counting their calls.
func failing(err error, calls *int) Loaders {
	return Loaders{
		Events: func(*bpfsource.Kernel) (*bpfsource.Source, error) { *calls++; return nil, err },
		Locks:  func(*bpfsource.Kernel) (*bpfsource.SockLocks, error) { *calls++; return nil, err },
		Files:  func(*bpfsource.Kernel) (*bpfsource.FileOwners, error) { *calls++; return nil, err },
		Trace:  func(bpfsource.TraceOptions) (*bpfsource.Tracer, error) { *calls++; return nil, err },
	}
}

// procWithFiles is a proc root whose fs/file-nr says n files are open.
func procWithFiles(t *testing.T, n int) string {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sys/fs/file-nr"), []byte(fmt.Sprintf("%d\t0\t100000\n", n)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestOpen: the one way every command gets its eBPF sources says
// the same things as each did on its own: off and replay load nothing,
// auto notes one cause once, on fails naming the command.
func TestOpen(t *testing.T) {
	boom := errors.New("boom")
	all := Need{Events: true, Locks: true, Files: true}
	for _, c := range []struct {
		name    string
		cfg     Config
		calls   int
		err     string
		notes   []string
		locksOf string
	}{
		{name: "off", cfg: Config{Mode: ModeOff, Need: all}, locksOf: "eBPF off (--bpf off)"},
		{name: "replay", cfg: Config{Mode: ModeOn, Need: all, Replay: true}},
		{name: "auto, one cause said once", cfg: Config{Mode: ModeAuto, Need: all}, calls: 3,
			notes:   []string{"note: eBPF off: boom: no connection events, and pinned buffers judged from their sizes only (--bpf off silences this)"},
			locksOf: "eBPF iter/tcp not loaded: boom"},
		{name: "auto, locks not needed", cfg: Config{Mode: ModeAuto, Need: Need{Events: true}}, calls: 1,
			notes:   []string{"note: eBPF connection events off: boom (--bpf off silences this)"},
			locksOf: "not read: sockets reads buffer lock bits with --json --locks"},
		{name: "on", cfg: Config{Mode: ModeOn, Need: all}, calls: 3, err: "--bpf on: boom"},
		{name: "on, watch", cfg: Config{Mode: ModeOn, Need: Need{Events: true}, Command: "watch"}, calls: 1, err: "watch: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls int
			var notes []string
			cfg := c.cfg
			cfg.Loaders = failing(boom, &calls)
			cfg.Note = func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }
			x, err := Open(cfg)
			if calls != c.calls {
				t.Errorf("%d loads, want %d", calls, c.calls)
			}
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			if strings.Join(notes, "\n") != strings.Join(c.notes, "\n") {
				t.Errorf("notes %q, want %q", notes, c.notes)
			}
			o := x.Options(collect.Options{Owners: true})
			if o.Locks != nil || o.LocksOff != c.locksOf || o.Files != nil || x.Events() != nil {
				t.Errorf("options %+v, events %v; want nothing loaded and LocksOff %q", o, x.Events(), c.locksOf)
			}
		})
	}
}

// TestLazyFiles: sockets' owner walk loads once, when first walked, and
// only on a host with collect.KernelFilesMin open files or with --bpf on; never
// without owners.
func TestLazyFiles(t *testing.T) {
	boom := errors.New("boom")
	var calls int
	x, err := Open(Config{Mode: ModeAuto, Need: Need{FilesLazily: true}, ProcRoot: procWithFiles(t, collect.KernelFilesMin),
		Loaders: Loaders{Files: failing(boom, &calls).Files}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if calls != 0 {
		t.Fatalf("loaded %d times before the walk", calls)
	}
	if x.Options(collect.Options{}).Files != nil {
		t.Error("a file walk without owners")
	}
	f := x.Options(collect.Options{Owners: true}).Files
	if f == nil {
		t.Fatal("no file walk with owners on a big host")
	}
	for range 2 {
		if _, err := f(); !errors.Is(err, boom) {
			t.Errorf("walk: %v, want boom", err)
		}
	}
	if calls != 1 {
		t.Errorf("loaded %d times, want once", calls)
	}
	small, err := Open(Config{Mode: ModeAuto, Need: Need{FilesLazily: true}, ProcRoot: procWithFiles(t, collect.KernelFilesMin-1),
		Loaders: Loaders{Files: failing(boom, &calls).Files}})
	if err != nil {
		t.Fatal(err)
	}
	if small.Options(collect.Options{Owners: true}).Files != nil {
		t.Error("the kernel's walk on a host where the readlinks cost less")
	}
	// --bpf on asks for it however few files are open.
	on, err := Open(Config{Mode: ModeOn, Need: Need{FilesLazily: true}, ProcRoot: procWithFiles(t, collect.KernelFilesMin-1),
		Loaders: Loaders{Files: failing(boom, &calls).Files}})
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close()
	if on.Options(collect.Options{Owners: true}).Files == nil {
		t.Error("--bpf on: no kernel walk on a small host")
	}
}

// TestOpenTrace: trace's programs follow the same --bpf choice.
func TestOpenTrace(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		mode  Mode
		why   string
		err   string
		notes int
	}{
		{ModeOff, "eBPF off (--bpf off)", "", 0},
		{ModeAuto, "boom", "", 1},
		{ModeOn, "", "trace: --bpf on: boom", 0},
	} {
		var calls int
		var notes []string
		x, err := Open(Config{Mode: c.mode, Loaders: failing(boom, &calls),
			Note: func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }})
		if err != nil {
			t.Fatal(err)
		}
		tr, why, err := x.OpenTrace(1, nil)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tr != nil || why != c.why || got != c.err || len(notes) != c.notes {
			t.Errorf("%s: OpenTrace = %v, %q, %q (notes %q); want %q, %q", c.mode, tr, why, got, notes, c.why, c.err)
		}
		x.Close()
	}
	if _, err := ParseMode("sometimes"); err == nil || !strings.Contains(err.Error(), `not "sometimes"`) {
		t.Errorf("ParseMode(sometimes) = %v", err)
	}
}

// TestEventsBeside: with Need.EventsBeside the events load on their own
// goroutine once iter/tcp has loaded, and the collector's reading waits
// for them; one that fails reads as no source and is noted once, as a
// failure in Open is. Where iter/tcp cannot load, the events load
// in Open as before (the "auto" cases of TestOpen), and so
// they do on a host of eventsBesideMax sockets or more.
func TestEventsBeside(t *testing.T) {
	real := Programs()
	if l, err := real.Locks(nil); err != nil {
		t.Skipf("iter/tcp cannot load here: %v", err)
	} else {
		l.Close()
	}
	need := Need{Events: true, EventsBeside: true, Locks: true}
	slow := func(k *bpfsource.Kernel) (*bpfsource.Source, error) {
		time.Sleep(100 * time.Millisecond)
		return real.Events(k)
	}
	x, err := Open(Config{Mode: ModeAuto, Need: need, Loaders: Loaders{Events: slow, Locks: real.Locks}})
	if err != nil {
		t.Fatal(err)
	}
	if x.Source != nil || x.events == nil {
		t.Fatalf("events loaded in Open (Source %v), want beside", x.Source)
	}
	snaps := []*snapshot.Snapshot{{Netns: snapshot.Netns{Inode: 1}}}
	collect.AddEvents(x.Events(), snaps...)
	if !slices.ContainsFunc(snaps[0].Sources, func(st snapshot.SourceStat) bool { return st.Source == snapshot.SourceBPF && st.OK }) || snaps[0].Events == nil {
		if errors.Is(x.events.err, bpfsource.ErrNotSupported) {
			x.Close()
			t.Skipf("the events cannot load here: %v", x.events.err)
		}
		t.Errorf("after the beside load: sources %+v, events %v (load error %v)", snaps[0].Sources, snaps[0].Events, x.events.err)
	}
	x.Close()

	boom := errors.New("boom")
	var notes []string
	x, err = Open(Config{Mode: ModeAuto, Need: need, Note: func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) },
		Loaders: Loaders{Events: func(*bpfsource.Kernel) (*bpfsource.Source, error) { return nil, boom }, Locks: real.Locks}})
	if err != nil {
		t.Fatal(err)
	}
	snaps = []*snapshot.Snapshot{{Netns: snapshot.Netns{Inode: 1}}}
	for range 2 {
		collect.AddEvents(x.Events(), snaps...)
	}
	x.Close()
	if len(snaps[0].Sources) != 0 || snaps[0].Events != nil || len(snaps[0].Errors) != 0 {
		t.Errorf("a failed beside load: sources %+v, events %v, errors %v; want no source", snaps[0].Sources, snaps[0].Events, snaps[0].Errors)
	}
	if want := []string{"note: eBPF connection events off: boom (--bpf off silences this)"}; !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
	big := t.TempDir()
	if err := os.MkdirAll(filepath.Join(big, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("sockets: used 9\nTCP: inuse 1 orphan 0 tw 0 alloc %d mem 1\n", eventsBesideMax)
	if err := os.WriteFile(filepath.Join(big, "net/sockstat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := hostSockets(big); n != eventsBesideMax {
		t.Fatalf("hostSockets = %d, want %d", n, eventsBesideMax)
	}
	x, err = Open(Config{Mode: ModeAuto, Need: need, ProcRoot: big, Loaders: Loaders{Events: slow, Locks: real.Locks}})
	if err != nil {
		t.Fatal(err)
	}
	if x.events != nil || x.Source == nil {
		t.Errorf("on a host of %d sockets: the events loaded beside (%v) or not at all", eventsBesideMax, x.events != nil)
	}
	x.Close()

}

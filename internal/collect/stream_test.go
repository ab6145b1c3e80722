package collect

import (
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testns"
)

// brokenFiles is a FileLister whose walk fails.
type brokenFiles struct{}

func (brokenFiles) Files(func(tgid, pid, fd, ino uint32)) error {
	return errors.New("iterator read: truncated record")
}

// streamOwners streams ns and returns each socket's owners by local
// address and port, and the namespace's header.
func streamOwners(t *testing.T, ns netns.NS, files procs.FileLister) (map[string][]int, *snapshot.Snapshot) {
	t.Helper()
	st := &Streamer{Opts: StreamOptions{Owners: true, ProcRoot: "/proc", Files: files}, Now: time.Now}
	got := map[string][]int{}
	heads, err := st.Stream([]netns.NS{ns}, func(_ *snapshot.Snapshot, sk *snapshot.Socket) error {
		got[sk.Local.String()+">"+sk.Remote.String()] = slices.Clone(sk.Pids)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, heads[0]
}

// TestStreamFileOwners: owners found by the kernel's file walk are those
// the /proc walk finds; a walk that fails is said and the /proc walk
// stands in.
func TestStreamFileOwners(t *testing.T) {
	ns := testns.New(t, "strown")
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		closers = append(closers, func() { ln.Close() })
		for range 3 {
			c, s, err := testns.DialAccept(ln)
			if err != nil {
				return err
			}
			closers = append(closers, func() { c.Close(); s.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	viaProc, _ := streamOwners(t, ns, nil)
	if len(viaProc) != 7 {
		t.Fatalf("streamed %d sockets, want 7 (a listener, three pairs)", len(viaProc))
	}
	for k, pids := range viaProc {
		if !slices.Contains(pids, os.Getpid()) {
			t.Fatalf("/proc walk: %s owned by %v, want us (%d)", k, pids, os.Getpid())
		}
	}

	fo, err := bpfsource.OpenFileOwners(nil)
	if err != nil {
		t.Logf("iter/task_file cannot load here (%v): only the fallback is checked", err)
	} else {
		defer fo.Close()
		viaKernel, head := streamOwners(t, ns, fo)
		for k, want := range viaProc {
			if !slices.Equal(viaKernel[k], want) {
				t.Errorf("%s: kernel walk found owners %v, /proc walk %v", k, viaKernel[k], want)
			}
		}
		if !hasSource(head, snapshot.SourceFileOwners, true) {
			t.Errorf("sources %+v: want %s, ok", head.Sources, snapshot.SourceFileOwners)
		}
	}

	fallback, head := streamOwners(t, ns, brokenFiles{})
	for k, want := range viaProc {
		if !slices.Equal(fallback[k], want) {
			t.Errorf("after a failed kernel walk, %s: owners %v, want %v", k, fallback[k], want)
		}
	}
	if !hasSource(head, snapshot.SourceFileOwners, false) {
		t.Errorf("sources %+v: want %s, failed", head.Sources, snapshot.SourceFileOwners)
	}
	said := false
	for _, e := range head.Errors {
		said = said || e.Source == snapshot.SourceFileOwners && strings.Contains(e.Err, "truncated record") && strings.Contains(e.Err, "/proc/PID/fd instead")
	}
	if !said {
		t.Errorf("errors %+v: the failed walk and the fallback are not said", head.Errors)
	}
}

func hasSource(s *snapshot.Snapshot, name string, ok bool) bool {
	for _, src := range s.Sources {
		if src.Source == name && src.OK == ok {
			return true
		}
	}
	return false
}

// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// historyRSSBound is the most `history` may hold of a store, whatever its
// size: it streams the timeline (docs/history.md, "Reading").
const historyRSSBound = 96 << 20

// TestHistoryStoreMemory: `history` and `history --html` over a whole
// store read it as a stream, their peak RSS bounded whatever its size.
// The store is 2 MiB of timeline by default; TCPDOCTOR_HISTORY_STORE_SIZE
// (bytes, or 256MiB: a full default store) makes it that size. Each run
// says its time and peak RSS.
func TestHistoryStoreMemory(t *testing.T) {
	size := int64(2 << 20)
	if s := os.Getenv("TCPDOCTOR_HISTORY_STORE_SIZE"); s != "" {
		var err error
		if size, err = history.ParseSize(s); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "history")
	start := time.Now()
	// 200 namespaces at 15 s windows: a week is about 180 MiB of timeline
	// as this writes it; more namespaces for a larger store.
	nss := max(200, int(size/(180<<20)*200+200))
	windows, written, err := bench.HistoryStore(dir, size, nss, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("store: %d windows of %d namespaces, %d MiB of timeline, written in %s", windows, nss, written>>20, time.Since(start).Round(time.Millisecond))
	for _, args := range [][]string{
		{"history", dir, "--since", "8d"},
		{"history", dir, "--since", "8d", "--json"},
		{"history", dir, "--since", "8d", "--html", filepath.Join(t.TempDir(), "h.html")},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
		out := &testns.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%.2000s", args, err, out.String())
		}
		took := time.Since(t0)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		rss := ru.Maxrss << 10
		head, _, _ := strings.Cut(out.String(), "\n")
		t.Logf("%v: %s, peak RSS %d MiB, CPU %s: %.200s", args[2:], took.Round(time.Millisecond), rss>>20,
			(time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Round(time.Millisecond), head)
		if rss > historyRSSBound {
			t.Errorf("%v: peak RSS %d MiB over a %d MiB store, want at most %d MiB", args, rss>>20, written>>20, historyRSSBound>>20)
		}
		if !strings.Contains(out.String(), strconv.Itoa(windows)) && args[len(args)-1] != "--json" && !strings.Contains(args[len(args)-2], "--html") {
			t.Errorf("%v: the listing does not count the %d windows: %.300s", args, windows, out.String())
		}
	}
}

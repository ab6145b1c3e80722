// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// said keeps what a daemon says.
type said struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *said) logf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, format+"\n", a...)
}

func (s *said) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// options are a daemon on loopback collecting our own namespace every
// 100 ms (without root, collection errors are recorded, not fatal), with
// history in dir and pages behind /history.
func options(dir string, s *said) Options {
	return Options{
		Interval:   100 * time.Millisecond,
		Namespaces: func() ([]netns.NS, error) { return []netns.NS{{Name: "host", Path: "/proc/self/ns/net"}}, nil },
		OpenExtras: func() (*bpfload.Extras, error) {
			return bpfload.Open(bpfload.Config{Mode: bpfload.ModeOff})
		},
		Rules:     rules.All(),
		Top:       exporter.DefaultTop,
		Web:       exporter.Web{ListenAddress: "127.0.0.1:0"},
		MaxConns:  exporter.DefaultMaxConns,
		History:   history.Options{Dir: dir, Tool: "test"},
		Trace:     history.TraceOptions{Duration: time.Second, PerHour: 6, Cooldown: time.Hour},
		TraceRate: 100,
		Pages:     http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the pages\n") }),
		Now:       time.Now,
		Sleep:     window.Sleep,
		Logf:      s.logf,
		Log:       io.Discard,
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestRun: the daemon serves the loop's metrics, the history store's own
// and the pages; a second daemon on the same history directory is a
// usage error; it stops with its context.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var s said
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, options(dir, &s)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	re := regexp.MustCompile(`serving (http://[0-9.:]+)/metrics, collecting every 100ms`)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(s.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("not serving:\n%s", s.String())
	}
	collections := regexp.MustCompile(`(?m)^tcpdoctor_collections_total ([0-9]+)$`)
	var metrics string
	n := 0
	for deadline := time.Now().Add(10 * time.Second); n < 3 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		metrics = get(t, base+"/metrics")
		if m := collections.FindStringSubmatch(metrics); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
	}
	if n < 3 {
		t.Errorf("%d collections in 10 s at 100 ms", n)
	}
	for _, want := range []string{"tcpdoctor_collections_total", "tcpdoctor_history_written_bytes_total", "tcpdoctor_history_errors_total 0",
		`tcpdoctor_history_pages_info{external_url="",scheme="http"} 1`, "tcpdoctor_build_info"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if got := get(t, base+PathHistory); got != "the pages\n" {
		t.Errorf("%s: %q", PathHistory, got)
	}
	if !strings.Contains(s.String(), "keeping history in "+dir) {
		t.Errorf("said:\n%s", s.String())
	}
	var ue *UsageError
	if err := Run(ctx, options(dir, &said{})); !errors.As(err, &ue) || !errors.Is(err, history.ErrInUse) {
		t.Errorf("a second daemon on %s: %v, want a usage error, in use", dir, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func TestServeAddr(t *testing.T) {
	addr, err := serveAddr(strings.NewReader("tcpdoctor: note: x\ntcpdoctor: serving http://127.0.0.1:4242/metrics, collecting every 2s\n"))
	if err != nil || addr != "127.0.0.1:4242" {
		t.Errorf("addr %q, %v", addr, err)
	}
	if _, err := serveAddr(strings.NewReader("tcpdoctor: serve: bind: in use\n")); err == nil {
		t.Error("no error for an exporter that did not start")
	}
}

func TestScrape(t *testing.T) {
	body := "# HELP x\ntcpdoctor_collections_total 3\ntcpdoctor_collection_sockets{netns=\"a\"} 5\nother{l=\"1\"} 9\nprocess_resident_memory_bytes 1e+06\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	m, n, err := scrape(http.DefaultClient, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"tcpdoctor_collections_total": 3, `tcpdoctor_collection_sockets{netns="a"}`: 5, "process_resident_memory_bytes": 1e6}
	if len(m) != len(want) || n != len(body) {
		t.Errorf("got %v (%d bytes), want %v (%d bytes)", m, n, want, len(body))
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

// TestCollection runs a small collection bench with our own executable
// and checks it counts the sockets it opened and leaves no namespace.
func TestCollection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if testing.Short() {
		t.Skip("builds tcpdoctor-lab: not in -short")
	}
	self := testns.Lab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Collection(ctx, CollectionOptions{
		Conns: 300, Runs: 1, ProcRoot: "/proc", Progress: io.Discard,
		Self: Self{Hold: []string{self, "hold"}, Once: []string{self, "collect-once"}, Stderr: os.Stderr}, Split: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sockets < 600 || res.Ours <= 0 || res.SS <= 0 || res.PeakRSS <= 0 {
		t.Errorf("result %+v: want 600 sockets or more and every figure set", res)
	}
	if res.Whole <= 0 || res.Split <= 0 {
		t.Errorf("split dumps whole %v, split %v: want both timed (CollectionOptions.Split)", res.Whole, res.Split)
	}
	left, err := topo.List(topo.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if res.Netns == "" || slices.Contains(left, res.Netns) {
		t.Errorf("namespace %q left behind (have %v)", res.Netns, left)
	}
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func readPair(t *testing.T) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open("testdata/pair.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 {
		t.Fatalf("pair.jsonl: want 2 snapshots, got %d", len(snaps))
	}
	return snaps
}

func fixedClock() time.Time { return time.Unix(0, 0) }

// goldenRules is a fixed set, so a rule added later does not move the
// golden file.
func goldenRules(t *testing.T) []diag.Rule {
	t.Helper()
	var rs []diag.Rule
	for _, id := range []string{"connection-bottleneck", "listen-overflow", "port-exhaustion", "rwnd-limited", "slow-reader", "time-wait-churn"} {
		r, ok := rules.ByID(id)
		if !ok {
			t.Fatalf("rule %s missing", id)
		}
		rs = append(rs, r)
	}
	return rs
}

// scrape gathers reg in the text format.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// TestGolden feeds the recorded pair (testdata/regen.sh) and compares the
// whole exposition with testdata/pair.metrics.golden.
func TestGolden(t *testing.T) {
	snaps := readPair(t)
	x := NewTested(goldenRules(t), Options{Clock: fixedClock})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 120*time.Millisecond)
	first := scrape(t, reg)
	if strings.Contains(first, "tcpdoctor_finding{") {
		t.Errorf("findings after one sample; the first only opens the window")
	}
	x.Update(snaps[1:], 130*time.Millisecond)
	got := scrape(t, reg)
	golden := filepath.Join("testdata", "pair.metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("exposition differs from %s (go test -run Golden -update to accept):\n%s", golden, diffLines(string(want), got))
	}
	// What the recorded workload must show, whatever the golden says
	// (empty labels, absent to Prometheus, left out).
	bare := dropEmpty(got)
	for _, must := range []string{
		`tcpdoctor_finding{command="python3",local="127.0.0.1:8080",netns="golden",pid=`,
		`rule="listen-overflow",severity="critical"}`,
		`tcpdoctor_accept_queue_max_length{command="python3",local="127.0.0.1:8080",netns="golden",port="8080"} 8`,
		`tcpdoctor_connections_by_limiter{limiter="rwnd",netns="golden"} 1`,
		`tcpdoctor_ephemeral_ports_usable{netns="golden"} 28232`,
		`tcpdoctor_source_up{netns="golden",source="sockdiag"} 1`,
		`tcpdoctor_collections_total 2`,
	} {
		if !strings.Contains(bare, must) {
			t.Errorf("exposition lacks %q", must)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "tcpdoctor_tcpext_listen_overflows_total"); err != nil || n != 1 {
		t.Errorf("listen overflows series: %d, %v", n, err)
	}
}

// emptyLabel is a label with an empty value in the text format.
var emptyLabel = regexp.MustCompile(`[a-z_]+="",?`)

// dropEmpty removes the labels with empty values from an exposition, as
// Prometheus does when it stores a series.
func dropEmpty(text string) string {
	return strings.NewReplacer(",}", "}", "{}", "").Replace(emptyLabel.ReplaceAllString(text, ""))
}

// diffLines lists lines only in a or only in b.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestLintClean runs client_golang's own linter (what promtool check
// metrics runs) over the exposition of the recorded pair.
func TestLintClean(t *testing.T) {
	snaps := readPair(t)
	x := NewTested(rules.All(), Options{Clock: fixedClock})
	x.Update(snaps[:1], 0)
	x.Update(snaps[1:], 0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	probs, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestBounded checks that the top-N cut holds, that only the newest
// snapshot per namespace is kept, and that a vanished namespace is
// forgotten.
func TestBounded(t *testing.T) {
	snaps := readPair(t)
	x := NewTested(rules.All(), Options{Top: 1, Clock: fixedClock})
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	x.Update(snaps[1:], 0)
	for _, name := range []string{"tcpdoctor_accept_queue_length", "tcpdoctor_ephemeral_ports_in_use", "tcpdoctor_listener_connections"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("%s with --top 1: %d series, %v", name, n, err)
		}
	}
	if x.windows.Len() != 1 || x.windows.Base("golden") == nil || x.windows.Base("golden").Snap.Taken != snaps[1].Taken {
		t.Errorf("kept %d snapshots, want only the newest", x.windows.Len())
	}
	other := *snaps[1]
	other.Netns = snapshot.Netns{Name: "other"}
	other.Taken = snaps[1].Taken.Add(time.Second)
	x.Update([]*snapshot.Snapshot{&other}, 0)
	if x.windows.Base("golden") != nil || x.windows.Len() != 1 {
		t.Errorf("vanished namespace still kept: %v", x.windows.Len())
	}
	if n, _ := testutil.GatherAndCount(reg, "tcpdoctor_finding"); n != 0 {
		t.Errorf("a new namespace's first snapshot produced %d findings", n)
	}
}

// TestFindingCollision: two findings with one label set must not break
// the scrape (a registry refuses duplicate series).
func TestFindingCollision(t *testing.T) {
	snaps := readPair(t)
	twice := diag.Rule{ID: "twice", Check: func(in *diag.Input) ([]diag.Finding, error) {
		f := diag.Finding{Severity: diag.Warning, Subject: diag.Subject{Local: diag.MustParseAddress("1.2.3.4:5")}}
		return []diag.Finding{f, f}, nil
	}}
	boom := diag.Rule{ID: "boom", Check: func(in *diag.Input) ([]diag.Finding, error) { panic("bad rule") }}
	x := NewTested([]diag.Rule{twice, boom}, Options{Clock: fixedClock})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	x.Update(snaps[1:], 0)
	if n, err := testutil.GatherAndCount(reg, "tcpdoctor_finding"); err != nil || n != 1 {
		t.Errorf("findings: %d, %v", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "tcpdoctor_rule_unknown"); err != nil || n != 1 {
		t.Errorf("panicking rule not reported unknown: %d, %v", n, err)
	}
}

func TestCounterName(t *testing.T) {
	for key, want := range map[string]string{
		"TcpExt.ListenOverflows":      "tcpdoctor_tcpext_listen_overflows_total",
		"TcpExt.TCPTimeWaitOverflow":  "tcpdoctor_tcpext_tcp_time_wait_overflow_total",
		"TcpExt.TCPReqQFullDoCookies": "tcpdoctor_tcpext_tcp_req_q_full_do_cookies_total",
		"Tcp.RetransSegs":             "tcpdoctor_tcp_retrans_segs_total",
	} {
		if got := counterName(key); got != want {
			t.Errorf("counterName(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestLimiterOf(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		sh   snapshot.Shares
		want string
	}{
		{snapshot.Shares{Window: s, Busy: s / 4}, "app"},
		{snapshot.Shares{Window: s, Busy: s, Rwnd: s * 9 / 10, Cwnd: s / 10}, "rwnd"},
		{snapshot.Shares{Window: s, Busy: s, Sndbuf: s * 6 / 10, Cwnd: s * 4 / 10}, "sndbuf"},
		{snapshot.Shares{Window: s, Busy: s, Cwnd: s}, "cwnd"},
	} {
		if got := limiterOf(c.sh); got != c.want {
			t.Errorf("limiterOf(%+v) = %s, want %s", c.sh, got, c.want)
		}
	}
}

// TestConcurrentScrapes scrapes while collections are published (run
// with -race): a scrape sees one whole view or the next, never a mix.
func TestConcurrentScrapes(t *testing.T) {
	snaps := readPair(t)
	x := NewTested(goldenRules(t), Options{Clock: fixedClock})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	done := make(chan struct{})
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := reg.Gather(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		cur := *snaps[1]
		cur.Taken = snaps[1].Taken.Add(time.Duration(i) * time.Second)
		x.Update([]*snapshot.Snapshot{&cur}, 0)
	}
	close(done)
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := testutil.GatherAndCount(reg, "tcpdoctor_collections_total"); n != 1 {
		t.Fatalf("collections_total series: %d", n)
	}
}

// TestWindowNeedsSameNamespace: a name now held by another namespace (an
// inode change) starts afresh instead of diffing unrelated counters, and
// a failed sock_diag gives no limiter counts rather than zeros.
func TestWindowNeedsSameNamespace(t *testing.T) {
	snaps := readPair(t)
	x := NewTested(rules.All(), Options{Clock: fixedClock})
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	moved := *snaps[1]
	moved.Netns.Inode = snaps[0].Netns.Inode + 1
	x.Update([]*snapshot.Snapshot{&moved}, 0)
	if n, _ := testutil.GatherAndCount(reg, "tcpdoctor_finding", "tcpdoctor_window_seconds"); n != 0 {
		t.Errorf("window across two namespaces: %d finding/window series", n)
	}

	y := NewTested(rules.All(), Options{Clock: fixedClock})
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(y)
	y.Update(snaps[:1], 0)
	broken := *snaps[1]
	broken.Sockets = nil
	broken.Errors = append([]snapshot.SourceError{}, snapshot.SourceError{Source: snapshot.SourceSockdiag, Err: "sockdiag: dump AF_INET: boom"})
	y.Update([]*snapshot.Snapshot{&broken}, 0)
	if n, _ := testutil.GatherAndCount(reg2, "tcpdoctor_connections_by_limiter"); n != 0 {
		t.Errorf("sock_diag failed, yet %d limiter series", n)
	}
}

// TestAppCaps: a server at its own limit (the app-connection-cap
// fixture: nginx's worker at 255 of 256) shows its limit, what counts
// against it, the connections its listener holds, and the finding.
func TestAppCaps(t *testing.T) {
	f, err := os.Open("../rules/testdata/app-connection-cap/fires.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	x := NewTested(rules.All(), Options{Clock: fixedClock})
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	x.Update(snaps[1:], 0)
	out := scrape(t, reg)
	for _, want := range []string{
		`tcpdoctor_app_connection_limit{command="nginx",container="",namespace="",netns="capx",pid="10862",pod="",setting="worker_connections"} 256`,
		`tcpdoctor_app_connections{command="nginx",container="",namespace="",netns="capx",pid="10862",pod="",setting="worker_connections"} 255`,
		`tcpdoctor_listener_connections{command="nginx",container="",local="127.0.0.1:8080",namespace="",netns="capx",pod="",port="8080"} 127`,
		`tcpdoctor_listener_connections{command="python3",container="",local="127.0.0.1:9000",namespace="",netns="capx",pod="",port="9000"} 127`,
		`tcpdoctor_finding{command="nginx",container="",local="127.0.0.1:8080",namespace="",netns="capx",peer_namespace="",peer_pod="",pid="10862",pod="",remote="",rule="app-connection-cap",severity="critical"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

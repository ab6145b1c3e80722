// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// TestChurnReusedConnections: a keep-alive client against a stock nginx
// reconnects every 1,000 requests (keepalive_requests); at 150 closes a
// second the connections live about 2 s. That is a note, not a warning,
// and neither the summary nor the fixes say it opens one per request.
func TestChurnReusedConnections(t *testing.T) {
	flow := tcpmodel.Flow{Opener: netip.MustParseAddr("127.0.0.1"), Service: netip.MustParseAddrPort("127.0.0.1:8080")}
	// All open connections new in the window unless a pool is given.
	churn := func(open, byService, byOpener int) *tcpmodel.Churn {
		return &tcpmodel.Churn{Flow: flow, Window: 5 * time.Second, ClosedByService: byService, ClosedByOpener: byOpener,
			Open: open, OpenNew: open, LocalOpener: true, LocalService: true}
	}
	turns := func(c *tcpmodel.Churn, n uint32) *tcpmodel.Churn {
		c.Exchanges = n
		return c
	}
	old := func(c *tcpmodel.Churn, n int) *tcpmodel.Churn {
		c.ClosedOld = n
		return c
	}
	withPool := func(c *tcpmodel.Churn, pool int) *tcpmodel.Churn {
		c.Open += pool
		return c
	}
	in := diag.NewInput(&snapshot.Snapshot{}, &snapshot.Snapshot{Taken: time.Unix(5, 0)}, diag.Options{})
	// wrk's end: its 1,000 connections, open at the previous sample,
	// close at once and open no new ones: no churn at all.
	if c := old(churn(0, 0, 1000), 1000); churnSeverity(c) != 0 || c.Rate() != 0 {
		t.Errorf("long-lived connections ending: severity %v, rate %.0f/s", churnSeverity(c), c.Rate())
	}
	for _, c := range []struct {
		name     string
		c        *tcpmodel.Churn
		sev      diag.Severity
		sum, fix string
	}{
		{"one request per connection", churn(5, 750, 0), diag.Warning, "about one request per connection", "instead of opening one per request"},
		// wrk against python3 -m http.server (HTTP/1.0): wrk closes first.
		{"keep-alive client, HTTP/1.0 server", churn(5, 90, 660), diag.Warning, "the opener closes first", "python3's http.server answers HTTP/1.0 by default"},
		{"server ends reused connections", churn(300, 750, 0), diag.Info, "end after a number of requests or an idle time set by the client's pool (a maximum lifetime) or by the service: nginx keepalive_requests", "keepalive_requests (default 1000)"},
		// A pool of 300 beside one-request connections: 2 s on average,
		// but the new ones live 7 ms.
		{"pool beside one-request connections", withPool(churn(1, 0, 150*5), 300), diag.Warning, "the opener closes first", "instead of opening one per request"},
		// wrk against nginx at 68,000 requests/s over 50 connections: 0.7 s
		// each, but 1,000 requests each (500 turns so far at the median).
		{"short-lived but reused", turns(churn(105, 750, 0), 500), diag.Info, "carrying 500 request/response turns or more", "keepalive_requests (default 1000)"},
		// A pool of 500 draining beside 100 new one-request connections
		// a second: the drained ones are not openings.
		{"pool draining during churn", old(churn(1, 0, 1000), 500), diag.Warning, "499 of the 1000 closed were already open at the previous sample and not replaced", "instead of opening one per request"},
		{"either side closes reused connections first", churn(300, 350, 400), diag.Info, "the opener closes first (TIME_WAIT on its side, holding its ports); these connections are reused", "maximum connection lifetime"},
	} {
		sev := churnSeverity(c.c)
		if sev != c.sev {
			t.Errorf("%s: severity %v, want %v (rate %.0f/s, lifetime %s)", c.name, sev, c.sev, c.c.Rate(), c.c.Lifetime())
		}
		f := churnFinding(in, c.c, sev)
		if !strings.Contains(f.Summary, c.sum) {
			t.Errorf("%s: summary %q, want %q in it", c.name, f.Summary, c.sum)
		}
		var fixes []string
		for _, x := range f.Fixes {
			fixes = append(fixes, x.Text)
		}
		if all := strings.Join(fixes, " | "); !strings.Contains(all, c.fix) {
			t.Errorf("%s: fixes %q, want %q in them", c.name, all, c.fix)
		}
		if c.sev == diag.Info && (strings.Contains(f.Summary, "one request per connection") || strings.Contains(strings.Join(fixes, ""), "one per request")) {
			t.Errorf("%s: reused connections said to be one per request: %q", c.name, f.Summary)
		}
	}
}

// TestChurnNamesTheServersKeepAliveSettings: the fix names the settings of
// the server that ends the connections (apache2 at its default 100
// requests a connection under wrk), all the common ones when it is not
// known.
func TestChurnNamesTheServersKeepAliveSettings(t *testing.T) {
	flow := tcpmodel.Flow{Opener: netip.MustParseAddr("127.0.0.1"), Service: netip.MustParseAddrPort("127.0.0.1:80")}
	cur := &snapshot.Snapshot{Taken: time.Unix(5, 0), Procs: map[int]*snapshot.Proc{7: {Pid: 7, Command: "apache2"}}}
	in := diag.NewInput(&snapshot.Snapshot{}, cur, diag.Options{})
	for _, c := range []struct {
		server int
		want   string
	}{{7, "Apache MaxKeepAliveRequests (default 100)"}, {0, "nginx keepalive_requests (default 1000) and keepalive_timeout; Apache"}} {
		ch := &tcpmodel.Churn{Flow: flow, Window: 2 * time.Second, ClosedByService: 300, Open: 100, OpenNew: 100, Exchanges: 47,
			LocalOpener: true, LocalService: true}
		if c.server != 0 {
			ch.Server.Add(c.server)
		}
		f := churnFinding(in, ch, churnSeverity(ch))
		if !strings.Contains(f.Summary, c.want) || len(f.Fixes) == 0 || !strings.Contains(f.Fixes[0].Text, c.want) {
			t.Errorf("server %d: summary %q, fixes %+v; want %q in both", c.server, f.Summary, f.Fixes, c.want)
		}
	}
	// A busy apache2's event MPM cuts keep-alive connections short: a few
	// requests each, closed by the service, a warning naming why.
	ch := &tcpmodel.Churn{Flow: flow, Window: 2 * time.Second, ClosedByService: 5000, Open: 100, OpenNew: 100, Exchanges: 3,
		LocalOpener: true, LocalService: true}
	ch.Server.Add(7)
	sev := churnSeverity(ch)
	f := churnFinding(in, ch, sev)
	var fixes []string
	for _, x := range f.Fixes {
		fixes = append(fixes, x.Text)
	}
	if sev != diag.Warning || !strings.Contains(f.Summary, "the service closes first (TIME_WAIT on its side: Connection: close after MaxKeepAliveRequests, or its event MPM") ||
		!strings.Contains(strings.Join(fixes, "\n"), "every worker thread is busy") {
		t.Errorf("busy apache2: %v %q, fixes %q", sev, f.Summary, fixes)
	}
}

// TestChurnResetCloses: a python3 client (internal/testkit/corpus's
// churn_client.py with linger0) opens about 2,000 connections/s to an
// echo server in the same namespace and closes each with SO_LINGER 0:
// every close is a reset, no TIME_WAIT is left. Recorded with tcpdoctor
// record --interval 3s, with the eBPF source (linger0.jsonl: 5,232
// connects, 5,231 TCP_STATE resets) and with --bpf off
// (linger0-nobpf.jsonl: Tcp.ActiveOpens, OutRsts and TCPAbortOnData
// +5,996 each). Both are churn at a warning, not silence.
func TestChurnResetCloses(t *testing.T) {
	r := connectionChurn()
	for _, c := range []struct {
		file, cmd, sum string
	}{
		{"linger0.jsonl", "python3", "the opener ends each with a reset"},
		{"linger0-nobpf.jsonl", "", "end them with a reset, leaving no TIME_WAIT"},
	} {
		res := runFixtureOpts(t, r, filepath.Join("testdata", r.ID, c.file), diag.Options{})
		if len(res.Unknown) > 0 {
			t.Errorf("%s: unknown %+v", c.file, res.Unknown)
		}
		var hit *diag.Finding
		for i, f := range res.Findings {
			if f.Severity >= diag.Warning {
				if hit != nil {
					t.Errorf("%s: a second warning: %+v", c.file, f)
				}
				hit = &res.Findings[i]
			}
		}
		if hit == nil {
			t.Errorf("%s: no warning: %+v", c.file, res.Findings)
			continue
		}
		if hit.Subject.Remote.String() != "127.0.0.1:7000" || hit.Subject.Command != c.cmd || !strings.Contains(hit.Summary, c.sum) {
			t.Errorf("%s: %+v %q, want %s to 127.0.0.1:7000 saying %q", c.file, hit.Subject, hit.Summary, c.cmd, c.sum)
		}
		for _, x := range hit.Fixes {
			if x.Target == "server" {
				t.Errorf("%s: the opener resets its own connections, yet a server fix: %q", c.file, x.Text)
			}
		}
	}
}

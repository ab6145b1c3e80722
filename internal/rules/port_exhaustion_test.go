// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

func TestPortSeverity(t *testing.T) {
	for name, c := range map[string]struct {
		f    tcpmodel.Forecast
		want diag.Severity
	}{
		"full":                {tcpmodel.Forecast{Full: true, Frac: 1}, diag.Critical},
		"95% held":            {tcpmodel.Forecast{Frac: 0.95}, diag.Critical},
		"75% held":            {tcpmodel.Forecast{Frac: 0.75}, diag.Warning},
		"runs out in 30s":     {tcpmodel.Forecast{Frac: 0.3, Exhausts: true, ETA: 30 * time.Second}, diag.Critical},
		"runs out in 5m":      {tcpmodel.Forecast{Frac: 0.3, Exhausts: true, ETA: 5 * time.Minute}, diag.Warning},
		"runs out in an hour": {tcpmodel.Forecast{Frac: 0.3, Exhausts: true, ETA: time.Hour}, 0},
		"10% steady":          {tcpmodel.Forecast{Frac: 0.1}, 0},
	} {
		if got := portSeverity(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

func TestPortExhaustionUnknown(t *testing.T) {
	s := &snapshot.Snapshot{Taken: time.Unix(1, 0), Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "bogus"}}
	if _, err := checkPortExhaustion(diag.NewInput(nil, s, diag.Options{})); err == nil {
		t.Error("bad port range: want unknown")
	}
	s.Sysctls = nil
	if _, err := checkPortExhaustion(diag.NewInput(nil, s, diag.Options{})); err == nil {
		t.Error("no port range: want unknown")
	}
}

// TestPortDemandAndSMTPReuse: a python3 mailer (internal/testkit/corpus's
// smtp_client.py, 8 senders, a new smtplib session per mail) to Python's
// smtpd behind a veth, ip_local_port_range 40000-40999, recorded with
// tcpdoctor record --interval 3s (eBPF on) once the range was all in
// TIME_WAIT: 420 connect() calls in 3 s, 334 of them EADDRNOTAVAIL. The
// sockets hold the 1,000 ports the range has, so sizing from them says
// "about 1000"; the demand is the failed connects plus the held ones,
// about 140/s x 60 s. The reuse fix speaks SMTP, not HTTP pools.
func TestPortDemandAndSMTPReuse(t *testing.T) {
	r := portExhaustion()
	res := runFixtureOpts(t, r, filepath.Join("testdata", r.ID, "smtp-exhausted.jsonl"), diag.Options{})
	if len(res.Findings) != 1 || res.Findings[0].Severity != diag.Critical || res.Findings[0].Subject.Remote.String() != "198.18.4.2:25" {
		t.Fatalf("want one critical finding to 198.18.4.2:25: %+v", res.Findings)
	}
	f := res.Findings[0]
	var spread, reuse string
	for _, x := range f.Fixes {
		switch x.Target {
		case "topology":
			spread = x.Text
		case "python", "connection-pool":
			reuse = x.Text + " " + x.Command
		}
	}
	var need int
	if i := strings.Index(spread, "needs about "); i >= 0 {
		fmt.Sscanf(spread[i+len("needs about "):], "%d", &need)
	}
	if need < 5000 {
		t.Errorf("spread fix sized for %d ports, want the demand (about 8,400: 140 connects/s x 60 s): %q", need, spread)
	}
	if !strings.Contains(reuse, "SMTP session") || !strings.Contains(reuse, "smtplib") {
		t.Errorf("reuse fix does not speak SMTP: %q", reuse)
	}
	for _, bad := range []string{"HTTP", "http", "requests.Session", "OkHttp", "HikariCP", "Redis"} {
		if strings.Contains(reuse, bad) {
			t.Errorf("reuse fix for an SMTP destination names %q: %q", bad, reuse)
		}
	}
}

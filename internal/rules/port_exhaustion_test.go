package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestForecastPorts(t *testing.T) {
	for name, c := range map[string]struct {
		u        portUse
		usable   int
		window   time.Duration
		full     bool
		exhausts bool
		eta      time.Duration
		sev      diag.Severity
	}{
		"single sample, 95%":      {portUse{used: 950}, 1000, 0, false, false, 0, diag.Critical},
		"single sample, 10%":      {portUse{used: 100}, 1000, 0, false, false, 0, 0},
		"zero usable":             {portUse{used: 0}, 0, 5 * time.Second, true, false, 0, diag.Critical},
		"full":                    {portUse{used: 1000, prevUsed: 990}, 1000, 5 * time.Second, true, false, 0, diag.Critical},
		"churn that does not fit": {portUse{used: 500, tw: 400, prevUsed: 400, newTW: 100, newConns: 100}, 1000, 5 * time.Second, false, true, 25 * time.Second, diag.Critical},
		"churn that fits":         {portUse{used: 300, tw: 200, prevUsed: 250, newTW: 10, newConns: 10}, 1000, 5 * time.Second, false, false, 0, 0},
		"shrinking":               {portUse{used: 750, tw: 700, prevUsed: 800, newTW: 60}, 1000, 5 * time.Second, false, false, 0, diag.Warning},
		"slow growth, far away":   {portUse{used: 100, tw: 90, prevUsed: 99, newTW: 100, newConns: 1}, 28232, 5 * time.Second, false, false, 0, 0},
		"negative window":         {portUse{used: 100, prevUsed: 0}, 1000, -time.Second, false, false, 0, 0},
	} {
		f := forecastPorts(c.u, c.usable, c.window)
		if f.full != c.full || f.exhausts != c.exhausts || f.eta != c.eta {
			t.Errorf("%s: full %v exhausts %v eta %v, want %v %v %v (%+v)", name, f.full, f.exhausts, f.eta, c.full, c.exhausts, c.eta, f)
		}
		if got := portSeverity(f); got != c.sev {
			t.Errorf("%s: severity %v, want %v", name, got, c.sev)
		}
	}
}

func TestSpreadAndWiden(t *testing.T) {
	if got := spreadFix(28231, 28232).Text; !strings.Contains(got, "spread over 2 ") {
		t.Errorf("spreadFix(28231): %s", got)
	}
	if got := spreadFix(60000, 28232).Text; !strings.Contains(got, "spread over 4 ") {
		t.Errorf("spreadFix(60000): %s", got)
	}
	e := &ephemeral{lo: 32768, hi: 60999, listen: map[uint16]bool{50000: true, 8080: true, 22: true}}
	f, ok := widenRangeFix(e, 28000)
	if !ok || !strings.Contains(f.Command, `ip_local_port_range="25536 65535"`) || !strings.Contains(f.Command, "ip_local_reserved_ports=50000 ") {
		t.Errorf("widenRangeFix: %v %+v", ok, f)
	}
	if _, ok := widenRangeFix(&ephemeral{lo: 1024, hi: 65535}, 100); ok {
		t.Error("widenRangeFix proposed a change to a full range")
	}
	if f, _ := widenRangeFix(&ephemeral{lo: 32768, hi: 60999}, 90000); !strings.Contains(f.Text, "still short") {
		t.Errorf("widenRangeFix beyond 64K ports: %s", f.Text)
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

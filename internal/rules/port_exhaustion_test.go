package rules

import (
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

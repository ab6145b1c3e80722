package rules

import (
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestTWSeverity(t *testing.T) {
	w := 5 * time.Second
	for name, c := range map[string]struct {
		u      portUse
		usable int
		window time.Duration
		want   diag.Severity
	}{
		"no time-wait":          {portUse{used: 900}, 1000, 0, 0},
		"few, single sample":    {portUse{used: 30, tw: 20}, 28232, 0, 0},
		"half, single sample":   {portUse{used: 600, tw: 550}, 1000, 0, diag.Warning},
		"churn exceeds range":   {portUse{used: 60, tw: 50, prevUsed: 10, newTW: 100, newConns: 100}, 1000, w, diag.Critical},
		"churn at 60% of range": {portUse{used: 600, tw: 580, prevUsed: 600, newTW: 50, newConns: 50}, 1000, w, diag.Warning},
		"steady pool":           {portUse{used: 32, tw: 1, prevUsed: 32}, 28232, w, 0},
	} {
		if got := twSeverity(c.u, forecastPorts(c.u, c.usable, c.window), c.usable); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

func TestTWRecycleAndBuckets(t *testing.T) {
	s := &snapshot.Snapshot{Taken: time.Unix(10, 0), Kernel: "4.9.0",
		Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "32768 60999", "net.ipv4.tcp_tw_recycle": "1", "net.ipv4.tcp_max_tw_buckets": "4"}}
	for i := 0; i < 4; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.TimeWait, Cookie: uint64(i + 1)})
	}
	fs, err := checkTimeWaitChurn(diag.NewInput(nil, s, diag.Options{}))
	if err != nil || len(fs) != 2 {
		t.Fatalf("want buckets and recycle findings, got %v %+v", err, fs)
	}
	s.Sysctls["net.ipv4.tcp_tw_recycle"] = "0"
	s.Sysctls["net.ipv4.tcp_max_tw_buckets"] = "262144"
	if fs, _ := checkTimeWaitChurn(diag.NewInput(nil, s, diag.Options{})); len(fs) != 0 {
		t.Errorf("want quiet, got %+v", fs)
	}
}

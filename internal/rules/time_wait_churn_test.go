// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

func TestTWSeverity(t *testing.T) {
	w := 5 * time.Second
	for name, c := range map[string]struct {
		u      tcpmodel.DestUse
		prev   int
		usable int
		want   diag.Severity
	}{
		"no time-wait":        {tcpmodel.DestUse{Open: 900}, 900, 1000, 0},
		"few":                 {tcpmodel.DestUse{Open: 10, TW: 20}, 30, 28232, 0},
		"half held by TW":     {tcpmodel.DestUse{Open: 50, TW: 550, ClosedIn: 40}, 600, 1000, diag.Warning},
		"churn exceeds range": {tcpmodel.DestUse{Open: 10, TW: 100, ClosedIn: 100}, 10, 1000, diag.Critical},
		// Loopback with tcp_tw_reuse=2: most TIME_WAIT is reusable.
		"reused":      {tcpmodel.DestUse{Open: 1, TW: 900, TWReusable: 880, ClosedIn: 600, Reuse: true}, 21, 1000, 0},
		"steady pool": {tcpmodel.DestUse{Open: 32, TW: 1}, 33, 28232, 0},
	} {
		f := c.u.Forecast(c.usable, c.prev, w, time.Second)
		if got := twSeverity(&c.u, f, c.usable); got != c.want {
			t.Errorf("%s: %v, want %v (%+v)", name, got, c.want, f)
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

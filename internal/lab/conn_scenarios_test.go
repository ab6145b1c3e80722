// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"strings"
	"testing"
	"time"
)

// connQuick runs one of the connection scenarios (c2-*, c4-time-wait,
// healthy) in quick form, which must take at most 60 s.
func connQuick(t *testing.T, s Scenario) *Result {
	t.Helper()
	res := runQuick(t, s, 2*time.Minute)
	if res.Elapsed > 60*time.Second {
		t.Errorf("quick form took %v, want at most 60s", res.Elapsed)
	}
	return res
}

func TestC2AcceptBacklogQuick(t *testing.T) {
	res := connQuick(t, c2AcceptBacklog())
	if fs := FiredOn(res.Before, "listen-overflow"); len(fs) == 0 || !strings.Contains(fs[0].Subject.Local.String(), ":7001") {
		t.Errorf("listen-overflow before the fix does not name :7001: %+v", fs)
	}
}

func TestC2PortExhaustionQuick(t *testing.T) {
	res := connQuick(t, c2PortExhaustion())
	if fs := FiredOn(res.Before, "port-exhaustion"); len(fs) == 0 || fs[0].Subject.Command != "proxy" {
		t.Errorf("port-exhaustion before the fix does not name the proxy: %+v", fs)
	}
}

func TestC4TimeWaitQuick(t *testing.T) { connQuick(t, c4TimeWait()) }

func TestHealthyQuick(t *testing.T) {
	res := connQuick(t, healthyScenario())
	if n := len(FiredOn(append(res.Before, res.After...), "listen-overflow", "port-exhaustion", "time-wait-churn", "retransmissions")); n != 0 {
		t.Errorf("%d findings on a healthy load", n)
	}
}

func TestC2AppCapQuick(t *testing.T) {
	res := connQuick(t, c2AppCap())
	fs := FiredOn(res.Before, "app-connection-cap")
	if len(fs) == 0 || fs[0].Subject.Command != "nginx" || !strings.Contains(fs[0].Subject.Local.String(), ":8080") || !strings.Contains(fs[0].Summary, "worker_connections 256") {
		t.Errorf("app-connection-cap before the fix does not name nginx, :8080 and worker_connections 256: %+v", fs)
	}
}

package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// connQuick runs one of the connection scenarios (c2-*, c4-time-wait,
// healthy) in quick form with a freshly built tcpdoctor, which runs the
// workloads and the delay line, and wants it reproduced.
func connQuick(t *testing.T, s Scenario) *Result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN, tbf)")
	}
	if testing.Short() {
		t.Skip("lab scenario: not in -short")
	}
	self := filepath.Join(t.TempDir(), "tcpdoctor")
	if out, err := exec.Command("go", "build", "-o", self, "github.com/tcpdoctor/tcpdoctor/cmd/tcpdoctor").CombinedOutput(); err != nil {
		t.Fatalf("build tcpdoctor: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log, out strings.Builder
	o := Options{Self: self, DelayLine: []string{self, "lab", "link-bench", "--delay-line-child"}, Quick: true, Log: &log}
	res, err := Execute(ctx, s, o)
	WriteText(&out, res)
	t.Logf("%s\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reproduced {
		t.Fatalf("%s not reproduced", s.Name)
	}
	if len(res.Table.Rows) < 2 {
		t.Errorf("table has %d rows, want at least 2", len(res.Table.Rows))
	}
	if res.Elapsed > 60*time.Second {
		t.Errorf("quick form took %v, want at most 60s", res.Elapsed)
	}
	return res
}

func TestC2AcceptBacklogQuick(t *testing.T) {
	res := connQuick(t, c2AcceptBacklog())
	if fs := FiredOn(res.Before, "listen-overflow"); len(fs) == 0 || !strings.Contains(fs[0].Subject.Local, ":7001") {
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

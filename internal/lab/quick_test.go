// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// runQuick runs s in quick form within limit with a freshly built
// tcpdoctor-lab (the traffic and the delay line run from it) and the
// tcpdoctor beside it (the diagnosis), and wants it reproduced with
// before and after rows.
func runQuick(t *testing.T, s Scenario, limit time.Duration) *Result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN, tbf)")
	}
	if testing.Short() {
		t.Skip("lab scenario: not in -short")
	}
	self := testns.Lab(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var log, out strings.Builder
	o := Options{Self: self, Tcpdoctor: filepath.Join(filepath.Dir(self), "tcpdoctor"), DelayLine: []string{self, "delay-line"}, Quick: true, Log: &log}
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
		t.Errorf("table has %d rows, want before and after", len(res.Table.Rows))
	}
	return res
}

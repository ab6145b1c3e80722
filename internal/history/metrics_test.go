// SPDX-License-Identifier: Apache-2.0

package history

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The store registers its own four metrics and reads them from its
// counters at each scrape.
func TestMetrics(t *testing.T) {
	r := New(Options{Dir: t.TempDir()})
	defer r.Close()
	reg := prometheus.NewRegistry()
	if err := reg.Register(r.Metrics()); err != nil {
		t.Fatal(err)
	}
	r.errs.Add(2)
	r.written.Add(4096)
	want := `# HELP tcpdoctor_history_errors_total Writes to the --history directory that failed (full disk, unwritable directory); metrics go on.
# TYPE tcpdoctor_history_errors_total counter
tcpdoctor_history_errors_total 2
# HELP tcpdoctor_history_written_bytes_total Bytes written to the --history directory (compressed).
# TYPE tcpdoctor_history_written_bytes_total counter
tcpdoctor_history_written_bytes_total 4096
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tcpdoctor_history_errors_total", "tcpdoctor_history_written_bytes_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Errorf("%d series, %v; want 4", n, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/phases"
)

// TestWritePhases: the medians of each part over the runs, placed after
// the fork, a repeated part numbered, the start and the exit the bench saw
// added, and the exit last.
func TestWritePhases(t *testing.T) {
	const ms = int64(time.Millisecond)
	run := func(fork, scale int64) Run {
		main := fork + 3*ms
		return Run{Wall: time.Duration(20 * ms), User: time.Duration(scale * 10 * ms), System: time.Duration(7 * ms), Phases: &RunPhases{Fork: fork, Reap: main + 17*ms, File: phases.File{Main: main, Spans: []phases.Span{
			{Name: "dump", Start: main + 2*ms, End: main + 2*ms + 5*scale*ms},
			{Name: "setup", Start: main, End: main + 2*ms},
			{Name: "format rows", Start: main + 3*ms, End: main + 9*ms, Total: 4 * ms, Count: 100},
			{Name: "dump", Start: main + 10*ms, End: main + 12*ms},
		}}}}
	}
	r := &E2EResult{Sizes: []SizeResult{{Rows: []Row{{Command: Command{Args: []string{"sockets"}, SS: []string{"ss", "-tinmp"}},
		Ours:   []Run{run(1000*ms, 1), run(5000*ms, 3), run(9000*ms, 2)},
		Theirs: []Run{{Wall: time.Duration(90 * ms), User: time.Duration(60 * ms), System: time.Duration(25 * ms)}, {Wall: time.Duration(110 * ms), User: time.Duration(70 * ms), System: time.Duration(31 * ms)}, {Wall: time.Duration(100 * ms), User: time.Duration(65 * ms), System: time.Duration(28 * ms)}}}}}}}
	var b bytes.Buffer
	if err := r.WritePhases(&b, 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"where `sockets` spent its 20ms, with 20.0 ms of user and 7.0 ms of system CPU (median of 3 runs",
		"start: fork to main (exec, Go runtime, init)  0.0   3.0   (3.0-3.0)",
		"setup                                         3.0   2.0   (2.0-2.0)",
		"dump                                          5.0   10.0  (5.0-15.0)",
		"format rows, 100 pieces                       6.0   4.0   (4.0-4.0)",
		"dump #2                                       13.0  2.0   (2.0-2.0)",
		"exit: last part to reaped                     15.0  5.0   (0.0-5.0)",
		"against `ss -tinmp`: 100ms, with 65.0 ms of user and 28.0 ms of system CPU (median of 3 runs)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if i, j, k := strings.Index(out, "dump #2"), strings.Index(out, "exit:"), strings.Index(out, "against"); i > j || j > k {
		t.Errorf("the exit is not the last part, or ss's line not after the table:\n%s", out)
	}
}

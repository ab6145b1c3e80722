// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestIdleProcs: the idle processes run until stop, which ends each one
// the bench started, by its PID.
func TestIdleProcs(t *testing.T) {
	p, err := startIdle(3)
	defer p.stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 3 || countProcs("/proc") < 3 {
		t.Fatalf("%d started, %d processes counted", len(p), countProcs("/proc"))
	}
	pids := []int{}
	for _, c := range p {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("pid %d not running: %v", c.Process.Pid, err)
		}
		pids = append(pids, c.Process.Pid)
	}
	p.stop()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + itoa(pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pid %d still there after stop: %v", pid, err)
		}
	}
	if countProcs("/nonexistent") != 0 {
		t.Error("an unreadable /proc counts processes")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// MaxIdle bounds --procs.
const MaxIdle = 20000

// idleProcs are the bench's idle processes.
type idleProcs []*exec.Cmd

// startIdle starts n processes that sleep (for at most an hour) with
// stdio on /dev/null; each dies with the bench's thread that started it
// (Pdeathsig), and stop kills the rest by their PIDs.
func startIdle(n int) (idleProcs, error) {
	var out idleProcs
	for range n {
		c := exec.Command("sleep", "3600")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return out, fmt.Errorf("bench: --procs: starting idle process %d of %d: %w", len(out)+1, n, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (p idleProcs) stop() {
	for _, c := range p {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

// countProcs is the processes in procRoot (numeric entries), 0 if it
// cannot be read.
func countProcs(procRoot string) int {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// SPDX-License-Identifier: Apache-2.0

// The machine's CPU pressure and steal time around a bench.

package linkemu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuStall reads the "some" total stall time from a PSI file.
func cpuStall(path string) (time.Duration, error) {
	if path == "-" {
		return 0, errors.New("skipped")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseStall(string(b))
}

// cpuSteal returns the steal and total jiffies of the "cpu" line of
// /proc/stat.
func cpuSteal(path string) (steal, total int64, err error) {
	if path == "-" {
		return 0, 0, errors.New("skipped")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	return parseSteal(string(b))
}

func parseSteal(s string) (steal, total int64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("linkemu: /proc/stat: first line %q is not the cpu total", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("linkemu: /proc/stat: %q: %w", v, err)
		}
		if i < 8 { // guest times are already in user and nice
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return steal, total, nil
}

// parseStall finds total= on the "some" line of a PSI file (microseconds).
func parseStall(s string) (time.Duration, error) {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("linkemu: psi total %q: %w", v, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, errors.New("linkemu: psi: no some total")
}

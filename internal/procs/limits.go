// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limit is one resource limit from /proc/PID/limits; -1 means unlimited.
type Limit struct{ Soft, Hard int64 }

// parseLimits parses /proc/PID/limits into limits keyed by name ("Max open
// files"). Malformed lines are skipped and reported; good lines are kept.
func parseLimits(r io.Reader) (map[string]Limit, error) {
	out := make(map[string]Limit)
	sc := bufio.NewScanner(r)
	var bad []string
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "Limit" {
			continue // blank or header
		}
		// The name is every word before the first value.
		i := 0
		for i < len(f) && !isLimitValue(f[i]) {
			i++
		}
		if i == 0 || i+1 >= len(f) {
			bad = append(bad, strconv.Itoa(line))
			continue
		}
		soft, ok1 := limitValue(f[i])
		hard, ok2 := limitValue(f[i+1])
		if !ok1 || !ok2 {
			bad = append(bad, strconv.Itoa(line))
			continue
		}
		out[strings.Join(f[:i], " ")] = Limit{Soft: soft, Hard: hard}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("procs: limits: %w", err)
	}
	if len(bad) > 0 {
		return out, errors.New("procs: limits: malformed line " + strings.Join(bad, ", "))
	}
	return out, nil
}

func isLimitValue(s string) bool {
	if s == "unlimited" {
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func limitValue(s string) (int64, bool) {
	if s == "unlimited" {
		return -1, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// startTime reads field 22 of <proc>/<pid>/stat: the process's start
// time in clock ticks since boot, which tells a reused pid from the
// process first seen with it.
func startTime(proc string, pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStartTime(b)
}

// parseStartTime reads field 22 of a /proc/PID/stat line. The command
// (field 2) is in parentheses and may hold spaces and ')', so fields are
// counted after the last ')'.
func parseStartTime(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')' after the command")
	}
	// Fields 3 onwards; field 22 is the 20th of them.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("stat: %d fields after the command, want 20 or more", len(f))
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: start time: %w", err)
	}
	return v, nil
}

// netnsInode reads the inode of <proc>/<pid>/ns/net ("net:[4026532177]").
func netnsInode(proc string, pid int) (uint64, error) {
	s, err := os.Readlink(filepath.Join(proc, strconv.Itoa(pid), "ns", "net"))
	if err != nil {
		return 0, err
	}
	return parseNSLink(s)
}

// parseNSLink reads a namespace link's text, "net:[4026532177]".
func parseNSLink(s string) (uint64, error) {
	_, rest, ok := strings.Cut(s, ":[")
	num, ok2 := strings.CutSuffix(rest, "]")
	if !ok || !ok2 {
		return 0, fmt.Errorf("ns link %q: want type:[inode]", s)
	}
	return strconv.ParseUint(num, 10, 64)
}

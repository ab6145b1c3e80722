// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"os"
	"strconv"
	"strings"
)

// Sockets lists the socket inodes one process holds now, read from
// Root/PID/fd, and its command. It is the quick second look the collector
// takes at the few processes opening sockets right now.
func (s Scanner) Sockets(pid int) (string, []uint32, error) {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	dir := root + "/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return "", nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", nil, err
	}
	var out []uint32
	for _, n := range names {
		link, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue // closed since listing
		}
		if ino, ok := parseSocketLink([]byte(link)); ok {
			out = append(out, ino)
		}
	}
	comm, _ := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSuffix(string(comm), "\n"), out, nil
}

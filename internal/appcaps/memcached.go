// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"fmt"
	"strconv"
	"strings"
)

// memcachedDefaultConns is memcached's compiled-in -c.
const memcachedDefaultConns = 1024

// memcachedConns reads memcached's connection limit from its command line
// (memcached keeps it whole: Debian's start-memcached turns
// /etc/memcached.conf into these options): -c N, -cN, --conn-limit=N or
// --conn-limit N, else the default.
func memcachedConns(argv []string) (int64, string, error) {
	v, src := "", ""
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-c" || a == "--conn-limit":
			if i+1 < len(argv) {
				i++
				v, src = argv[i], "command line "+a
			}
		case strings.HasPrefix(a, "--conn-limit="):
			v, src = strings.TrimPrefix(a, "--conn-limit="), "command line --conn-limit"
		case strings.HasPrefix(a, "-c") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			v, src = a[2:], "command line -c"
		}
	}
	if v == "" {
		return memcachedDefaultConns, "default (no -c on the command line)", nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, "", fmt.Errorf("%s %q is not a positive number", src, v)
	}
	return n, src, nil
}

// memcachedDefaultThreads is memcached's compiled-in -t.
const memcachedDefaultThreads = 4

// memcachedThreads reads memcached's worker threads from its command
// line: -t N, -tN, --threads=N or --threads N, else the default.
func memcachedThreads(argv []string) (int64, string) {
	v, src := "", ""
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-t" || a == "--threads":
			if i+1 < len(argv) {
				i++
				v, src = argv[i], "command line "+a
			}
		case strings.HasPrefix(a, "--threads="):
			v, src = strings.TrimPrefix(a, "--threads="), "command line --threads"
		case strings.HasPrefix(a, "-t") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			v, src = a[2:], "command line -t"
		}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
		return n, src
	}
	return memcachedDefaultThreads, "default (no -t on the command line)"
}

// memcachedReserved estimates what of -c memcached keeps for itself with
// threads worker threads. It turns a client away when accept() returns a
// descriptor at -c - 1 or above (memcached.c, maxconns_fast, on by
// default), so the descriptors it holds besides its clients' count
// against -c: measured on memcached 1.6.18 (-U 0, one TCP listener),
// 4 per worker thread plus 8 (stdio, the listener, the main event base,
// its background threads' pipes), and the one at -c - 1 itself: -c 64 -t
// 4 took 39 clients, -t 2 47, -c 100 -t 1 87, -t 3 79, -t 8 59. Its own
// "reserved_fds" stat (5 per thread) is not what the check uses. The
// rules count the process's open files instead where the sample has them
// (tcpmodel.CapReserved).
func memcachedReserved(threads int64) int64 { return 4*threads + 8 + 1 }

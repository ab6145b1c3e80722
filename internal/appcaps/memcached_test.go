// SPDX-License-Identifier: Apache-2.0

package appcaps

import "testing"

// TestMemcachedThreadsAndReserved: -t in its spellings, the default 4,
// and the estimate of what -c memcached keeps for itself, which the
// measurements on memcached 1.6.18 give: -c 64 -t 4 took 39 clients,
// -t 2 47, -c 100 -t 1 87, -t 3 79, -t 8 59.
func TestMemcachedThreadsAndReserved(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want int64
	}{
		{[]string{"memcached", "-c", "64"}, 4},
		{[]string{"memcached", "-t", "2"}, 2},
		{[]string{"memcached", "-t8"}, 8},
		{[]string{"memcached", "--threads=3"}, 3},
		{[]string{"memcached", "--threads", "1"}, 1},
		{[]string{"memcached", "-t", "none"}, 4},
	} {
		if got, _ := memcachedThreads(c.argv); got != c.want {
			t.Errorf("%q: %d threads, want %d", c.argv, got, c.want)
		}
	}
	for _, m := range []struct{ c, t, clients int64 }{{64, 4, 39}, {64, 2, 47}, {100, 1, 87}, {100, 3, 79}, {100, 8, 59}} {
		if got := m.c - memcachedReserved(m.t); got != m.clients {
			t.Errorf("-c %d -t %d: %d clients, measured %d", m.c, m.t, got, m.clients)
		}
	}
}

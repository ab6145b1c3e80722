// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// chronoSamples reads two samples of namespace "host", 2s apart: cookie 1
// busy 1.5s of the window (0.3s of it sndbuf-limited, 0.6s rwnd-limited),
// cookie 2 without chronographs, cookie 3 only in the second.
func chronoSamples(t *testing.T) (prev, cur *snapshot.Snapshot) {
	t.Helper()
	sock := func(cookie int, info string) string {
		return fmt.Sprintf(`{"family":2,"state":"ESTAB","local":"198.18.0.1:80","remote":"198.18.1.2:%d","cookie":%d%s}`, 40000+cookie, cookie, info)
	}
	chrono := func(busy, rwnd, sndbuf int) string {
		return fmt.Sprintf(`,"tcp_info":{"len":280,"busy_time":%d,"rwnd_limited":%d,"sndbuf_limited":%d}`, busy, rwnd, sndbuf)
	}
	old := `,"tcp_info":{"len":104,"rtt":2000}`
	text := `{"format": "tcpdoctor-snapshot", "version": 1}` + "\n" +
		`{"taken":"2026-01-01T00:00:00Z","netns":{"name":"host"},"sockets":[` + sock(1, chrono(1000000, 100000, 200000)) + "," + sock(2, old) + `]}` + "\n" +
		`{"taken":"2026-01-01T00:00:02Z","netns":{"name":"host"},"sockets":[` + sock(1, chrono(2500000, 700000, 500000)) + "," + sock(2, old) + "," + sock(3, chrono(10, 0, 0)) + `]}` + "\n"
	snaps, err := snapshot.ReadAll(strings.NewReader(text))
	if err != nil || len(snaps) != 2 {
		t.Fatalf("%d samples: %v", len(snaps), err)
	}
	return snaps[0], snaps[1]
}

// Chronos, fed the first sample socket by socket, gives what LimitedOf
// gives from both samples whole.
func TestChronosLimited(t *testing.T) {
	prev, cur := chronoSamples(t)
	c := NewChronos()
	for i := range prev.Sockets {
		c.Add(prev, &prev.Sockets[i])
	}
	c.Taken(prev)
	want := Limited{Window: 2 * time.Second, Busy: 0.75, Sndbuf: 0.2, Rwnd: 0.4, Congestion: 0.4}
	var l Limited
	if !c.Limited(cur, &cur.Sockets[0], &l) || l != want {
		t.Errorf("cookie 1: %+v, want %+v", l, want)
	}
	var pb, cb snapshot.TCPInfo
	var whole Limited
	if !LimitedOf(prev.Sockets[0].TCP(&pb), cur.Sockets[0].TCP(&cb), cur.Taken.Sub(prev.Taken), &whole) || whole != want {
		t.Errorf("LimitedOf: %+v, want %+v", whole, want)
	}
	for _, i := range []int{1, 2} { // no chronographs; not in the first sample
		if c.Limited(cur, &cur.Sockets[i], &l) {
			t.Errorf("cookie %d: limited %+v without two samples of its chronographs", cur.Sockets[i].Cookie, l)
		}
	}
	other := *cur
	other.Netns.Name = "other"
	if c.Limited(&other, &cur.Sockets[0], &l) {
		t.Error("a cookie of another namespace matched")
	}
}

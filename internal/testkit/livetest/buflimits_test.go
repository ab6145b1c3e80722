// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

// TestBufferLimits: host settings that cap what a busy path needs, on
// autotuned bulk flows through a 20 ms, 200 Mbit/s link (BDP 500K).
//
// net.core.wmem_max and rmem_max cannot be lowered in a test namespace:
// on this kernel a child namespace shows the host's values read-only
// (mode 0444), and the host is not ours to change. The triggers are the
// namespace's own tcp_rmem (max lowered to 256K while an upload shows the
// path's rate: downloads on that path are capped) and a receiver that
// asks SO_RCVBUF above the host's rmem_max and is capped at 2 x rmem_max
// while tcp_rmem[2] allows more. Defaults on the same path are quiet.
func TestBufferLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sysctl []string // in the client namespace
		rcvcap bool     // the server asks SO_RCVBUF 2 x rmem_max; sample the server
		want   string   // summary prefix of the one finding; "" quiet
		sev    diag.Severity
	}{
		{name: "tcp_rmem_max_256K", sysctl: []string{"net.ipv4.tcp_rmem=4096 131072 262144"},
			want: "net.ipv4.tcp_rmem[2] 262144 is below what an observed path needs", sev: diag.Warning},
		// The cap is real but this 200 Mbit/s x 20 ms path (BDP ~500K)
		// does not fill the 8M buffer it got: reported, as info.
		{name: "rcvbuf_capped", rcvcap: true, want: "1 connections have SO_RCVBUF capped at 2 x net.core.rmem_max", sev: diag.Info},
		{name: "defaults"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 200e6, RateDown: 200e6})
			Sysctl(t, p.client, tc.sysctl...)
			ns := p.client
			var srvSetup func(fd int) error
			if tc.rcvcap {
				ns = p.server
				rmax := readSysctl(t, p.server, "net/core/rmem_max")
				rmem := strings.Fields(readSysctl(t, p.server, "net/ipv4/tcp_rmem"))
				t.Logf("server namespace: rmem_max %s (the host's, read-only), tcp_rmem %v", rmax, rmem)
				n, err := strconv.Atoi(rmax)
				if err != nil || len(rmem) != 3 {
					t.Fatalf("rmem_max %q, tcp_rmem %v", rmax, rmem)
				}
				if m, _ := strconv.Atoi(rmem[2]); m <= n {
					t.Skipf("tcp_rmem[2] %d is not above rmem_max %d here: a capped request loses nothing", m, n)
				}
				srvSetup = setBuf(unix.SO_RCVBUF, 2*n)
			}
			// Upload: client to server.
			c, s, local, _ := pairAcross(t, p, nil, srvSetup)
			loop(t, []int{c, s}, writer(c))
			loop(t, []int{c, s}, reader(s, 256<<10, 0))
			// Download: server to client, read by the client at once.
			dc, ds, dlocal, _ := pairAcross(t, p, nil, nil)
			loop(t, []int{dc, ds}, writer(ds))
			loop(t, []int{dc, ds}, reader(dc, 256<<10, 0))
			time.Sleep(time.Second)
			r, b, prev, cur := sample(t, ns, 1500*time.Millisecond)
			up := acked(prev, cur, local) / 1e6
			if tc.rcvcap {
				up = received(prev, cur, local) / 1e6
			}
			down := received(prev, cur, dlocal) / 1e6 // the client's end: meaningless when the server is sampled
			if tc.rcvcap {
				down = -1
			}
			t.Logf("upload %.1f Mbit/s; download %.1f Mbit/s", up, down)
			if up < 50 {
				t.Fatalf("upload moved %.1f Mbit/s: not a busy path", up)
			}
			// The lowered tcp_rmem[2] must really hold the download back,
			// and defaults must not.
			if tc.sysctl != nil && down > up/2 {
				t.Errorf("download %.1f Mbit/s not held back by tcp_rmem[2] (upload %.1f)", down, up)
			}
			if tc.want == "" && down < 100 {
				t.Fatalf("download %.1f Mbit/s: baseline not busy enough to judge", down)
			}
			fs := r.Find("buffer-limits", diag.Info)
			for _, f := range fs {
				logFinding(t, f)
				for _, e := range f.Evidence {
					t.Logf("  %s = %s  [%s]", e.Name, e.Value, e.Source)
				}
			}
			if tc.want == "" {
				if len(fs) > 0 {
					t.Errorf("defaults raised buffer-limits:\n%s", b)
				}
				return
			}
			if len(fs) != 1 || fs[0].Severity != tc.sev || !strings.HasPrefix(fs[0].Summary, tc.want) {
				t.Fatalf("want one %s %q:\n%s", tc.sev, tc.want, b)
			}
			if fs[0].Subject.Netns != ns.Name {
				t.Errorf("subject %+v, want netns %s", fs[0].Subject, ns.Name)
			}
		})
	}
}

// readSysctl reads /proc/sys/key inside ns.
func readSysctl(t *testing.T, ns netns.NS, key string) string {
	t.Helper()
	var v string
	In(t, ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + key)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v
}

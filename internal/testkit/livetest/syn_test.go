// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestSynQueueOverflow fills a listener's SYN queue with ordinary
// connects: with TCP_DEFER_ACCEPT the listener ignores the handshake's
// final ACK until data comes, so each client that sends nothing leaves a
// request socket (SYN-RECV) in the queue. Past the backlog, further SYNs
// are dropped (tcp_syncookies=0) or answered with cookies (1).
func TestSynQueueOverflow(t *testing.T) {
	for _, cookies := range []int{0, 1} {
		t.Run(fmt.Sprintf("syncookies=%d", cookies), func(t *testing.T) {
			ns := testns.New(t, "synq")
			Sysctl(t, ns, fmt.Sprintf("net.ipv4.tcp_syncookies=%d", cookies))
			const backlog, clients = 8, 60
			var port uint16
			In(t, ns, func() error {
				_, a, err := Listen(t, backlog, func(fd int) error {
					return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 30)
				})
				port = a.Port()
				if err != nil {
					return err
				}
				for i := 0; i < clients; i++ {
					fd, err := DialNB(a)
					if err != nil {
						return err
					}
					Close(t, fd)
				}
				return nil
			})
			// The queue fills at once; dropped SYNs are retried after 1 s
			// and dropped again inside the window.
			prev := Collect(ns)
			time.Sleep(1500 * time.Millisecond)
			cur := Collect(ns)
			r, b := Diagnose(t, prev, cur)
			Record(t, fmt.Sprintf("syn-queue-overflow-cookies%d", cookies), prev, cur)
			for _, c := range []string{"ListenDrops", "ListenOverflows", "TCPReqQFullDrop", "TCPReqQFullDoCookies", "SyncookiesSent", "SyncookiesRecv", "SyncookiesFailed"} {
				t.Logf("%s %d -> %d", c, prev.Counters["TcpExt."+c], cur.Counters["TcpExt."+c])
			}
			fs := r.Find("syn-queue-overflow", diag.Warning)
			if len(fs) != 1 {
				t.Fatalf("syn-queue-overflow findings %d, want 1:\n%s", len(fs), b)
			}
			f := fs[0]
			t.Logf("%s: %s", f.Severity, f.Summary)
			for _, e := range f.Evidence {
				t.Logf("  %s = %s", e.Name, e.Value)
			}
			if f.Subject.Local.String() != fmt.Sprintf("127.0.0.1:%d", port) || f.Subject.Pid != os.Getpid() {
				t.Errorf("subject %+v, want 127.0.0.1:%d pid %d", f.Subject, port, os.Getpid())
			}
			want := "SYNs dropped"
			if cookies == 1 {
				want = "went to SYN cookies"
			}
			if !strings.Contains(f.Summary, want) {
				t.Errorf("summary %q does not say %q", f.Summary, want)
			}
		})
	}
}

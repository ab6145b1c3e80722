// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"strings"
	"testing"
	"time"
)

// startServer runs a server in the background and returns its address and
// a func that stops it and returns its result.
func startServer[R any](t *testing.T, run func(ctx context.Context, ready func(string)) (R, error)) (string, func() R) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	addrc := make(chan string, 1)
	type out struct {
		r   R
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := run(ctx, func(a string) { addrc <- a })
		done <- out{r, err}
	}()
	select {
	case a := <-addrc:
		var res *R
		stop := func() R {
			if res == nil {
				cancel()
				o := <-done
				if o.err != nil {
					t.Errorf("server: %v", o.err)
				}
				res = &o.r
			}
			return *res
		}
		t.Cleanup(func() { stop() })
		return a, stop
	case o := <-done:
		cancel()
		t.Fatalf("server did not start: %v", o.err)
		return "", nil
	}
}

// TestConnInfoInWords: the lab's log says a connection's figures in words,
// not as a Go struct.
func TestConnInfoInWords(t *testing.T) {
	c := ConnInfo{SndBuf: 2340864, RcvBuf: 131072, RTTUs: 20100, SndCwnd: 10, BusyUs: 2e6, RwndLimitedUs: 1.96e6, BytesSent: 3565158}
	got := c.String()
	for _, want := range []string{"sndbuf 2.2M", "rcvbuf 128K", "rtt 20ms", "cwnd 10", "rwnd-limited 98%", "sent 3.4M"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.ContainsAny(got, "{}:") {
		t.Errorf("%q reads as a struct", got)
	}
}

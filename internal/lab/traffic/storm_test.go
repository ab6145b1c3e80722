// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"testing"
	"time"
)

func TestStormFullBacklog(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (StormServerResult, error) {
		return RunStormServer(ctx, StormServerConfig{Addr: "127.0.0.1:0", Backlog: 1, AcceptRate: 0, Ready: ready})
	})
	res, err := RunStormClient(context.Background(), StormClientConfig{
		Addr: addr, Count: 8, Rate: 100, ConnectTimeout: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Attempted != 8 || res.Connected+res.Failed != 8 {
		t.Errorf("attempted %d, connected %d + failed %d, want 8", res.Attempted, res.Connected, res.Failed)
	}
	// Backlog 1 queues two connections; later SYNs are dropped, so the rest
	// time out or connect only after a SYN retransmission.
	if res.Connected < 1 || res.Failed+res.SlowConnects < 4 {
		t.Errorf("want some fast connects and at least 4 failed or slow: %+v", res)
	}
	if srv := stop(); srv.Accepted != 0 {
		t.Errorf("server accepted %d, want 0", srv.Accepted)
	}
}

func TestStormAccepting(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (StormServerResult, error) {
		return RunStormServer(ctx, StormServerConfig{Addr: "127.0.0.1:0", Backlog: 64, AcceptRate: -1, Ready: ready})
	})
	res, err := RunStormClient(context.Background(), StormClientConfig{Addr: addr, Count: 50, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 50 || res.Failed != 0 || res.SlowConnects != 0 || res.Seconds < 0.3 {
		t.Errorf("got %+v, want 50 fast connects held for 0.3 s", res)
	}
	if srv := stop(); srv.Accepted != 50 {
		t.Errorf("server accepted %d, want 50", srv.Accepted)
	}
}

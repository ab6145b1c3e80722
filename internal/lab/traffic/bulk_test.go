// SPDX-License-Identifier: Apache-2.0

package traffic

import (
	"context"
	"testing"
	"time"
)

func TestBulk(t *testing.T) {
	addr, stop := startServer(t, func(ctx context.Context, ready func(string)) (BulkServerResult, error) {
		return RunBulkServer(ctx, BulkServerConfig{Addr: "127.0.0.1:0", Count: 3, Ready: ready})
	})
	// A pinned 16K send buffer is slow even on loopback (~16 Mbit/s here),
	// so that run moves less.
	for _, tc := range []struct {
		dir  string
		bufs Buffers
		size int64
	}{
		{Up, Buffers{}, 8<<20 + 123},
		{Down, Buffers{RcvBuf: 16 << 10}, 8<<20 + 7},
		{Up, Buffers{SndBuf: 16 << 10}, 1<<20 + 1},
	} {
		size := tc.size
		res, err := RunBulkClient(context.Background(), BulkClientConfig{Addr: addr, Size: size, Direction: tc.dir, Buffers: tc.bufs})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %+v: %.1f Mbit/s in %.3f s", tc.dir, tc.bufs, res.Mbps, res.Seconds)
		if res.Bytes != size || res.Mbps <= 0 || res.ConnInfo == nil {
			t.Errorf("%s: %+v, want %d bytes", tc.dir, res, size)
		}
		if tc.bufs.SndBuf > 0 && res.ConnInfo.SndBuf != 2*tc.bufs.SndBuf {
			t.Errorf("sndbuf read back %d, want %d", res.ConnInfo.SndBuf, 2*tc.bufs.SndBuf)
		}
	}
	srv := stop()
	if len(srv.Transfers) != 3 {
		t.Fatalf("server saw %d transfers, want 3", len(srv.Transfers))
	}
	var total int64
	for _, tr := range srv.Transfers {
		if tr.Error != "" {
			t.Errorf("server transfer %+v", tr)
		}
		total += tr.Bytes
	}
	if want := int64(8<<20+123) + 8<<20 + 7 + 1<<20 + 1; total != want {
		t.Errorf("server moved %d bytes, want %d", total, want)
	}
}

func TestBulkSlowReader(t *testing.T) {
	addr, _ := startServer(t, func(ctx context.Context, ready func(string)) (BulkServerResult, error) {
		return RunBulkServer(ctx, BulkServerConfig{Addr: "127.0.0.1:0", ReadSize: 4096, ReadDelay: 10 * time.Millisecond, Ready: ready})
	})
	res, err := RunBulkClient(context.Background(), BulkClientConfig{Addr: addr, Size: 40960})
	if err != nil {
		t.Fatal(err)
	}
	// Ten reads of 4 KiB, each followed by 10 ms.
	if res.Seconds < 0.09 {
		t.Errorf("slow reader took %.3f s, want >= 0.09", res.Seconds)
	}
	if _, err := RunBulkClient(context.Background(), BulkClientConfig{Addr: addr, Size: 1, Direction: "sideways"}); err == nil {
		t.Error("bad direction accepted")
	}
}

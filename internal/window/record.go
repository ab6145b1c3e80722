// SPDX-License-Identifier: Apache-2.0

package window

import (
	"context"
	"runtime"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Record takes count samples of nss, started interval apart (Pause), and
// hands each to write as it is taken (i from 0), keeping none: record's
// loop. It returns sleep's error when ctx ends between samples (taken
// the samples written), or write's.
func Record(ctx context.Context, c *collect.Collector, nss []netns.NS, count int, interval time.Duration,
	sleep func(context.Context, time.Duration) error, write func(i int, snaps []*snapshot.Snapshot) error) (taken int, err error) {
	var last time.Time
	for i := range count {
		if i > 0 {
			if err := sleep(ctx, Pause(interval, c.Now().Sub(last))); err != nil {
				return i, err
			}
		}
		last = c.Now()
		snaps := c.Collect(nss)
		if err := write(i, snaps); err != nil {
			return i, err
		}
		if i < count-1 {
			// The sample is written: free it before the next is built,
			// or the heap, sized while this one was live, grows to hold
			// both (docs/performance.md, record at a million sockets).
			runtime.GC()
		}
	}
	return count, nil
}

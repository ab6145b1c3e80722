package checkup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

// Samples start interval apart: the wait is what the collection left of
// the interval, never negative.
func TestPause(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{time.Second, 300 * time.Millisecond, 700 * time.Millisecond},
		{time.Second, 0, time.Second},
		{time.Second, 2 * time.Second, 0},
		{time.Second, time.Second, 0},
	} {
		if got := Pause(c.interval, c.took); got != c.want {
			t.Errorf("Pause(%v, %v) = %v, want %v", c.interval, c.took, got, c.want)
		}
	}
}

type countLocks struct{ n *int }

func (c countLocks) Read() (*bpfsource.Locks, error) {
	*c.n++
	return &bpfsource.Locks{}, nil
}

// The sample that starts the window skips the lock-bit walk; the last
// one reads it, and each says where its bits came from or why not.
func TestSampleWalksLocksForTheLastSampleOnly(t *testing.T) {
	ns, err := netns.Default().Current()
	if err != nil {
		t.Skip(err)
	}
	walks := 0
	c := &collect.Collector{Opts: collect.Options{Locks: countLocks{&walks}, ProcRoot: "/proc"}, Now: time.Now}
	noSleep := func(context.Context, time.Duration) error { return nil }
	ss, err := Sample(context.Background(), c, []netns.NS{ns}, 2, time.Second, noSleep)
	if err != nil || len(ss) != 1 || len(ss[0].Snaps) != 2 {
		t.Fatalf("%v %+v", err, ss)
	}
	first, last := ss[0].Snaps[0].BufLocks, ss[0].Snaps[1].BufLocks
	if walks != 1 || first == nil || first.From != "" || !strings.Contains(first.Why, "starts the window") || last == nil || last.From == "" {
		t.Errorf("%d walks; first %+v, last %+v", walks, first, last)
	}
	if c.Opts.Locks == nil {
		t.Error("Sample changed the caller's collector")
	}
	walks = 0
	if _, err := Sample(context.Background(), c, []netns.NS{ns}, 1, 0, noSleep); err != nil || walks != 1 {
		t.Errorf("one sample: %d walks, %v", walks, err)
	}
}

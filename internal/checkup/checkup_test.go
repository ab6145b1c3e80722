package checkup

import (
	"testing"
	"time"
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

// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import "testing"

// One burst of 463 Mbit/s among samples of a 20 Mbit/s link does not
// move the estimate; too few samples give none.
func TestPathEstimate(t *testing.T) {
	mbit := func(v float64) float64 { return v * 1e6 / 8 }
	rs := []float64{mbit(18), mbit(17), mbit(463), mbit(19), mbit(18), 0, mbit(18.5), mbit(18)}
	if got, ok := PathEstimate(rs); !ok || got != mbit(18) {
		t.Errorf("PathEstimate = %g, %v; want %g (18 Mbit/s)", got, ok, mbit(18))
	}
	if got, ok := PathEstimate(rs[:4]); ok {
		t.Errorf("PathEstimate of 4 samples = %g, want none", got)
	}
	if got, _ := PathEstimate([]float64{1, 2, 3, 4, 5, 6}); got != 3.5 {
		t.Errorf("even count: %g, want 3.5", got)
	}
}

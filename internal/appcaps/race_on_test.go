// SPDX-License-Identifier: Apache-2.0

//go:build race

package appcaps

// The race detector slows every memory access several times over: the
// tests' time bounds are slowdown times longer under it, and the root
// test that measures serve's intervals does not run.
const (
	slowdown     = 10
	RaceDetector = true
)

// SPDX-License-Identifier: Apache-2.0

//go:build race

package trace

// raceDetector: the race detector slows every memory access several
// times over, which reshapes the timing the live test measures.
const raceDetector = true

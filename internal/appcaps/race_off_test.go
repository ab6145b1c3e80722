// SPDX-License-Identifier: Apache-2.0

//go:build !race

package appcaps

const (
	slowdown     = 1
	RaceDetector = false
)

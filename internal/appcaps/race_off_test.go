//go:build !race

package appcaps

const (
	slowdown     = 1
	RaceDetector = false
)

// SPDX-License-Identifier: Apache-2.0

package history

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime reads a time as --at, --since and --until take it: RFC 3339
// ("2026-11-27T03:12:00Z"), a clock time today in now's zone ("03:12",
// "03:12:30"), or a duration before now ("-30m", and "30m" or "2h" for
// --since's "the last 2h"; "7d" counts days).
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("empty time")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if c, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			y, m, d := now.Date()
			return time.Date(y, m, d, c.Hour(), c.Minute(), c.Second(), 0, now.Location()), nil
		}
	}
	d, err := parseDuration(strings.TrimPrefix(s, "-"))
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is not a time: want RFC 3339 (2026-11-27T03:12:00Z), a clock time today (03:12) or a duration before now (-30m, 2h, 7d)", s)
	}
	return now.Add(-d), nil
}

// parseDuration is time.ParseDuration that also takes whole days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 || v > 36500 {
			return 0, fmt.Errorf("bad day count %q", s)
		}
		return time.Duration(v) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// ParseAge reads --history-age: a duration, "7d" for days.
func ParseAge(s string) (time.Duration, error) {
	d, err := parseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (168h, 7d)", s)
	}
	return d, nil
}

// ParseSize reads --history-size: bytes, or a number with KB, MB, GB
// (powers of 1000) or KiB, MiB, GiB (powers of 1024).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[strings.ToUpper(unit)]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v <= 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a size (256MiB, 1GB, 500000000)", s)
	}
	return int64(v * mult), nil
}

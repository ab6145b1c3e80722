// SPDX-License-Identifier: Apache-2.0

package procnet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// maxLine bounds one line of a /proc/net file, far above netstat's
// TcpExt header, the longest (TestFillLive prints its length).
const maxLine = 1 << 20

// maxErrs bounds how many line errors one parse reports.
const maxErrs = 5

// ParseNetstat parses the netstat AND snmp format: pairs of lines, a header
// "Group: A B C" followed by values "Group: 1 2 3". Every counter is kept
// as "Group.A". A group whose pair is broken (other group on the value
// line, count mismatch, non-numeric value, header without values) is
// dropped and reported with its line number; the other groups are still
// stored. Values may be negative (Tcp MaxConn is -1); the kernel prints
// some as unsigned 64-bit, so values above math.MaxInt64 saturate at
// math.MaxInt64 rather than wrap.
func ParseNetstat(r io.Reader, into map[string]int64) error {
	return parseNetstat(r, "netstat", into)
}

// parseNetstat is ParseNetstat with the file name used in errors.
func parseNetstat(r io.Reader, file string, into map[string]int64) error {
	el := errList{file: file}
	var (
		hdr     []string // names of the pending header, nil if none
		hdrGrp  string
		hdrLine int
	)
	ok := scanGroups(r, 8192, &el, func(n int, grp, rest string, err error) {
		if err != nil {
			el.add(n, err)
			hdr = nil
			return
		}
		if hdr == nil {
			hdr, hdrGrp, hdrLine = strings.Fields(rest), grp, n
			return
		}
		if grp != hdrGrp {
			el.add(hdrLine, fmt.Errorf("%s header has no value line (line %d is %s)", hdrGrp, n, grp))
			// Resynchronise: this line starts the next pair.
			hdr, hdrGrp, hdrLine = strings.Fields(rest), grp, n
			return
		}
		vals := strings.Fields(rest)
		names := hdr
		hdr = nil
		if len(vals) != len(names) {
			el.add(n, fmt.Errorf("%s has %d values for %d names on line %d", grp, len(vals), len(names), hdrLine))
			return
		}
		if err := storeLine(into, grp, names, vals); err != nil {
			el.add(n, err)
		}
	})
	if ok && hdr != nil {
		el.add(hdrLine, fmt.Errorf("%s header has no value line", hdrGrp))
	}
	return el.err()
}

// ParseSockstat parses sockstat and sockstat6: lines of "PROTO: key value
// key value ...", e.g. "TCP: inuse 5 orphan 0 tw 3 alloc 7 mem 1" gives
// "TCP.inuse" 5 ... and "sockets: used 100" gives "sockets.used". A broken
// line is dropped and reported; the others are stored. Note "mem" is in
// pages, not bytes. Values saturate as in ParseNetstat.
func ParseSockstat(r io.Reader, into map[string]int64) error {
	return parseSockstat(r, "sockstat", into)
}

// parseSockstat is ParseSockstat with the file name used in errors.
func parseSockstat(r io.Reader, file string, into map[string]int64) error {
	el := errList{file: file}
	scanGroups(r, 1024, &el, func(n int, grp, rest string, err error) {
		if err != nil {
			el.add(n, err)
			return
		}
		f := strings.Fields(rest)
		if len(f)%2 != 0 {
			el.add(n, fmt.Errorf("%s: %d fields, want key value pairs", grp, len(f)))
			return
		}
		names, vals := make([]string, 0, len(f)/2), make([]string, 0, len(f)/2)
		for i := 0; i < len(f); i += 2 {
			names, vals = append(names, f[i]), append(vals, f[i+1])
		}
		if err := storeLine(into, grp, names, vals); err != nil {
			el.add(n, err)
		}
	})
	return el.err()
}

// scanGroups calls fn with each non-blank line of r, numbered from 1,
// split at its "Group:" prefix, or with why it has none. A read error
// (a line longer than maxLine among them) goes to el as the line after
// the last, and scanGroups returns false.
func scanGroups(r io.Reader, bufSize int, el *errList, fn func(n int, grp, rest string, err error)) bool {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, bufSize), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		grp, rest, err := splitGroup(line)
		fn(n, grp, rest, err)
	}
	if err := sc.Err(); err != nil {
		el.add(n+1, err)
		return false
	}
	return true
}

// storeLine parses one line's vals and stores them as grp.name, all or
// nothing: on a bad value it stores none and says which.
func storeLine(into map[string]int64, grp string, names, vals []string) error {
	parsed := make([]int64, len(vals))
	for i, v := range vals {
		x, err := parseValue(v)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", grp, names[i], err)
		}
		parsed[i] = x
	}
	for i, name := range names {
		into[grp+"."+name] = parsed[i]
	}
	return nil
}

// splitGroup splits "Group: rest" at the first colon.
func splitGroup(line string) (grp, rest string, err error) {
	grp, rest, ok := strings.Cut(line, ":")
	if !ok {
		return "", "", errors.New(`no "Group:" prefix`)
	}
	if grp == "" || strings.ContainsAny(grp, " \t") {
		return "", "", fmt.Errorf("bad group name %q", grp)
	}
	return grp, rest, nil
}

// parseValue parses a decimal counter, saturating unsigned values above
// math.MaxInt64 at math.MaxInt64.
func parseValue(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err == nil {
		return v, nil
	}
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
		if _, uerr := strconv.ParseUint(s, 10, 64); uerr == nil {
			return math.MaxInt64, nil
		}
	}
	return 0, fmt.Errorf("bad value %q", s)
}

// errList gathers per-line errors of one file.
type errList struct {
	file  string
	errs  []error
	extra int
}

func (e *errList) add(line int, err error) {
	if len(e.errs) >= maxErrs {
		e.extra++
		return
	}
	e.errs = append(e.errs, fmt.Errorf("procnet: %s line %d: %w", e.file, line, err))
}

func (e *errList) err() error {
	if e.extra > 0 {
		e.errs = append(e.errs, fmt.Errorf("procnet: %s: %d more errors", e.file, e.extra))
	}
	return errors.Join(e.errs...)
}

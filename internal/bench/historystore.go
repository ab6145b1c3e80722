// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

// HistoryStore writes a history store of about size bytes of timeline
// segments into dir (made), ending at end, as serve --history writes them
// at its default --interval over namespaces findings come and go in:
// each namespace's windows hold a warning that flaps (an incident every
// few windows) and a critical that lasts. Evidence files are not written:
// history only lists them, so a store of timeline alone is the most it
// reads for its size. It returns the windows written (one per namespace
// per collection) and the segments' bytes. Segments are compressed
// faster than serve compresses them, so the same bytes hold somewhat less
// JSON than serve's would.
func HistoryStore(dir string, size int64, namespaces int, end time.Time) (windows int, written int64, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, err
	}
	const interval = benchHistoryInterval
	// Collections a week holds, newest at end; segments of an hour, as
	// serve rotates them (or at size/16, whichever comes first).
	span := history.DefaultMaxAge
	n := int(span / interval)
	t0 := end.Add(-span)
	var (
		f      *os.File
		gz     *gzip.Writer
		enc    *json.Encoder
		segAt  time.Time
		segOut *countingFile
	)
	closeSeg := func() error {
		if f == nil {
			return nil
		}
		err := gz.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		written += segOut.n
		f = nil
		return err
	}
	for i := 1; i <= n && written < size; i++ {
		from, to := t0.Add(time.Duration(i-1)*interval), t0.Add(time.Duration(i)*interval)
		if f == nil || to.Sub(segAt) >= history.DefaultSegmentSpan || segOut.n >= history.DefaultMaxBytes/16 {
			if err := closeSeg(); err != nil {
				return windows, written, err
			}
			name := filepath.Join(dir, "timeline-"+to.UTC().Format("20060102T150405.000000000Z")+".jsonl.gz")
			if f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
				return windows, written, err
			}
			segOut = &countingFile{f: f}
			gz, _ = gzip.NewWriterLevel(segOut, gzip.BestSpeed)
			enc = json.NewEncoder(gz)
			segAt = to
			if err := enc.Encode(jsonl.Header{Format: history.FormatName, Version: history.FormatVersion, Tool: "tcpdoctor-lab bench"}); err != nil {
				return windows, written, err
			}
		}
		for ns := range namespaces {
			name := fmt.Sprintf("pod-%03d", ns)
			e := history.Entry{Netns: name, Inode: uint64(4026531840 + ns), From: from, To: to}
			if (i+ns)%4 != 0 { // a warning that flaps: three windows on, one off
				e.Findings = append(e.Findings, history.Finding{Rule: "listen-overflow", Severity: diag.Warning,
					Subject: diag.Subject{Netns: name, Local: diag.At(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(ns / 65536), byte(ns / 256 % 256), byte(ns % 256)}), 8080)), Pid: 1000 + ns, Command: "java"},
					Summary: fmt.Sprintf("listener :8080 (java pid %d) dropped %d connections in %s: its accept queue was full (%d/%d)", 1000+ns, (i*7+ns)%997, interval, 100+i%29, 128)})
			}
			if ns%10 == 0 {
				e.Findings = append(e.Findings, history.Finding{Rule: "port-exhaustion", Severity: diag.Critical,
					Subject: diag.Subject{Netns: name, Local: diag.Host(netip.AddrFrom4([4]byte{10, 0, 0, 1})), Remote: diag.At(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, byte(ns / 256), byte(ns % 256)}), 5432)), Pid: 2000 + ns, Command: "worker"},
					Summary: fmt.Sprintf("connections from 10.0.0.1 to 10.96.0.%d:5432 (worker pid %d) hold %d of 28231 usable ephemeral ports (%d%%)", ns%256, 2000+ns, 26000+(i*13+ns)%2000, 92+(i+ns)%7)})
			}
			if i%17 == 0 {
				e.Unknown = 1
			}
			if err := enc.Encode(&e); err != nil {
				return windows, written, err
			}
			windows++
		}
		if err := gz.Flush(); err != nil {
			return windows, written, err
		}
	}
	return windows, written, closeSeg()
}

// benchHistoryInterval is serve's default --interval.
const benchHistoryInterval = 15 * time.Second

type countingFile struct {
	f *os.File
	n int64
}

func (c *countingFile) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	c.n += int64(n)
	return n, err
}

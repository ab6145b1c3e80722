// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// BenchmarkDecode parses 32 KiB datagrams (what the kernel sends per recv)
// filled with the captured messages, cycled.
func BenchmarkDecode(b *testing.B) {
	msgs, _, seq := fixtureMessages(b)
	var sockMsgs [][]byte
	for _, m := range msgs {
		if ne.Uint16(m[4:]) == sockDiagByFam {
			sockMsgs = append(sockMsgs, m)
		}
	}
	var buf []byte
	n := 0
	for i := 0; ; i++ {
		m := sockMsgs[i%len(sockMsgs)]
		if len(buf)+len(m) > 32<<10 {
			break
		}
		buf = append(buf, m...)
		for len(buf)%4 != 0 {
			buf = append(buf, 0)
		}
		n++
	}
	keep := make([]*snapshot.Socket, 0, n)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		keep = keep[:0]
		if _, err := parseDump(buf, seq, 0, func(sk *snapshot.Socket) error { keep = append(keep, sk); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if len(keep) != n {
		b.Fatalf("decoded %d of %d", len(keep), n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/socket")
	// CPU time (all threads, GC included) is steadier than wall time on a
	// busy machine.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*n), "cpu-ns/socket")
	b.ReportMetric(float64(n), "sockets/op")
}

func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

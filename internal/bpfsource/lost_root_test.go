// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestNetworkEndedReachProgram reproduces, on request, connects the
// network ends that the lifecycle program never sees: rounds of five
// connects to an address the router answers with ICMP host unreachable
// (some time out instead), each round with a fresh Source (Lifetimes),
// holding what the program counted, plus the runs it reports skipped
// or lost, to the kernel's own count of the connects it ended in
// SYN_SENT in the namespace (Tcp AttemptFails). Beside the lifecycle
// program a second program on the same tracepoint counts every
// SYN_SENT->CLOSE to that address, so that a shortfall says whether the
// tracepoint reached any program at all.
//
// Beside a nice-19 build of std and this package's tests in a loop, 1
// round of 170 fell short by three connects that neither program saw,
// with no skipped run of either (docs/bpf.md, "Runs lost without a
// word"). It runs only with
// TCPDOCTOR_BPF_LOST=1 (rounds: TCPDOCTOR_BPF_LOST_ROUNDS, 100 unless
// set; about 3 s each).
func TestNetworkEndedReachProgram(t *testing.T) {
	testns.NeedRoot(t)
	if os.Getenv("TCPDOCTOR_BPF_LOST") != "1" {
		t.Skip("set TCPDOCTOR_BPF_LOST=1 to run the reproducer of uncounted network-ended connects")
	}
	rounds := 100
	if s := os.Getenv("TCPDOCTOR_BPF_LOST_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TCPDOCTOR_BPF_LOST_ROUNDS=%q: want a whole number above 0", s)
		}
		rounds = n
	}
	// Not TestFailedConnectCauses's address, so that one running beside
	// does not count here.
	dst := netip.MustParseAddrPort("198.18.10.77:80")
	ns := testns.New(t, "bpflost")
	behindRouter(t, ns)
	ended, endedSkipped := closesTo(t, dst.Addr())
	const par = 5
	var short []string
	var allKernel int64
	var allCounted, allSeen uint64
	for round := range rounds {
		src, err := Open(Options{Lifetimes: true})
		if err != nil {
			t.Fatal(err)
		}
		before := nsCounters(t, ns)["Tcp.AttemptFails"]
		seenBefore, skippedBefore := ended(), endedSkipped()
		errs := concurrentConnects(t, ns, dst, par)
		r, err := src.Read()
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Close()
		kernel := nsCounters(t, ns)["Tcp.AttemptFails"] - before
		seen, seenSkipped := ended()-seenBefore, endedSkipped()-skippedBefore
		var counted uint64
		for _, f := range r.ByNetns[ns.Inode] {
			counted += f.Refused + f.TimedOut + f.Unreachable + f.Abandoned + f.FailedPorts
		}
		allKernel, allCounted, allSeen = allKernel+kernel, allCounted+counted, allSeen+seen
		accounted := counted + r.Skipped["inet_sock_set_state"] + r.LostFlows + r.LostEvents + r.LostConns
		if accounted < uint64(kernel) {
			short = append(short, fmt.Sprintf("round %d: connects ended %v; the kernel ended %d in SYN_SENT, the lifecycle program counted %d (skipped %v, lost flows %d, conns %d, events %d), the second program saw %d (skipped %d, host-wide)",
				round, errs, kernel, counted, r.Skipped, r.LostFlows, r.LostConns, r.LostEvents, seen, seenSkipped))
		}
	}
	for _, s := range short {
		t.Error(s)
	}
	t.Logf("%d of %d rounds short; in all the kernel ended %d connects in SYN_SENT, the lifecycle program counted %d, the second program saw %d",
		len(short), rounds, allKernel, allCounted, allSeen)
}

// concurrentConnects makes n sockets in ns and connects them to dst at
// once, and returns how their connects ended, by error.
func concurrentConnects(t *testing.T, ns netns.NS, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	err := netns.Do(ns, func() error {
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_SYNCNT, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(fds))
	var wg sync.WaitGroup
	for i, fd := range fds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = unix.Connect(fd, sockaddr(dst))
		}()
	}
	wg.Wait()
	out := map[string]int{}
	for _, e := range errs {
		out[fmt.Sprint(e)]++
	}
	return out
}

// closesTo attaches, for the rest of the test, a program of its own to
// tp_btf/inet_sock_set_state that counts SYN_SENT->CLOSE of sockets
// connected to addr (skc_daddr, the first field of struct sock), and
// returns a reader of the count and of the runs the kernel skipped.
func closesTo(t *testing.T, addr netip.Addr) (seen, skipped func() uint64) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	a := addr.As4()
	daddr := int32(uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24)
	const synSent, closed = 2, 7
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord),  // sk
		asm.LoadMem(asm.R7, asm.R1, 8, asm.DWord),  // old state
		asm.LoadMem(asm.R8, asm.R1, 16, asm.DWord), // new state
		asm.JNE.Imm(asm.R7, synSent, "out"),
		asm.JNE.Imm(asm.R8, closed, "out"),
		asm.JEq.Imm(asm.R6, 0, "out"),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word),
		asm.JNE.Imm32(asm.R2, daddr, "out"),
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp,
		AttachTo: "inet_sock_set_state", Instructions: insns, License: "Dual BSD/GPL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	l, err := link.AttachTracing(link.TracingOptions{Program: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	seen = func() uint64 {
		var n uint64
		if err := m.Lookup(uint32(0), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	skipped = func() uint64 {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.RecursionMisses
	}
	return seen, skipped
}

// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Buffer sizes: a GSO packet is at most 64 KiB plus the vnet header;
// small packets (ACKs, pings) are copied into small buffers so that a
// queue full of ACKs does not pin 64 KiB each.
const (
	bigBuf   = vnetHdrLen + 65536 + 256
	smallBuf = 2048
	// maxQueued caps the memory held in the delay line; beyond it packets
	// are dropped and counted as overflows.
	maxQueued = 256 << 20
	// release packets due this close to now in the same wake-up.
	early = 10 * time.Microsecond
	// readBatch bounds reads between two release checks.
	readBatch = 64
)

type packet struct {
	buf []byte // len is the packet length, cap the buffer size
	due time.Duration
}

// line is one delay line: a single locked OS thread reads the TUN,
// stamps each packet with its release time and writes it back when due.
// With one delay for both directions release times are in arrival order,
// so a FIFO suffices.
type line struct {
	tun, wake int
	delay     time.Duration
	spin      time.Duration
	loss      float64
	seed      uint64
	rtPrio    int // SCHED_FIFO priority of the thread, 0 for none
	rng       *rand.Rand
	t0        time.Time

	q      []packet // ring
	head   int
	n      int
	queued int // bytes of buffer held by q

	small, big [][]byte // free buffers
	scratch    []byte   // the next read's buffer (bigBuf)

	st *counters // in shared memory when the line runs in a child process
	// cpu reads the CPU time charged to the line (its thread, or its
	// whole process in a child).
	cpu func() time.Duration
}

type counters struct {
	tid                       atomic.Int64
	packets, bytes            atomic.Int64
	lost, overflow, writeErrs atomic.Int64
	errSum, errMax, errMin    atomic.Int64 // hold error, ns
	cpuAtExit                 atomic.Int64 // cpu ns, set when run ends
	done                      atomic.Bool
	realtime                  atomic.Bool // the thread got SCHED_FIFO
	ready                     atomic.Bool // the thread is about to read the TUN
	hist                      [histBuckets]atomic.Int64
}

// Hold error histogram: bucket 0 is early (< 0), then 10 us buckets up to
// 2 ms, then doubling buckets.
const (
	histBuckets = histLinear + 22 // the last ends at 2ms<<21, about 70 minutes
	histStep    = 10 * time.Microsecond
	histLinear  = 200
)

func histIndex(e time.Duration) int {
	switch {
	case e < 0:
		return 0
	case e < histLinear*histStep:
		return 1 + int(e/histStep)
	}
	i := histLinear + 1
	for b := 2 * histLinear * histStep; e >= b && i < histBuckets-1; b *= 2 {
		i++
	}
	return i
}

// histUpper is the upper bound of bucket i.
func histUpper(i int) time.Duration {
	switch {
	case i == 0:
		return 0
	case i <= histLinear:
		return time.Duration(i) * histStep
	}
	return histLinear * histStep << (i - histLinear)
}

// quantile returns the upper bound of the bucket holding quantile q.
func (c *counters) quantile(q float64) time.Duration {
	var total int64
	for i := range c.hist {
		total += c.hist[i].Load()
	}
	if total == 0 {
		return 0
	}
	want := int64(q*float64(total-1)) + 1
	var n int64
	for i := range c.hist {
		if n += c.hist[i].Load(); n >= want {
			return histUpper(i)
		}
	}
	return histUpper(histBuckets - 1)
}

func newLine(delay, spin time.Duration, loss float64, seed uint64) *line {
	l := &line{
		tun: -1, wake: -1,
		delay: delay, spin: spin, loss: loss, seed: seed,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		t0:  time.Now(),
		st:  new(counters),
	}
	l.cpu = func() time.Duration {
		if tid := l.st.tid.Load(); tid != 0 {
			return threadCPU(int(tid))
		}
		return 0
	}
	return l
}

func (l *line) now() time.Duration { return time.Since(l.t0) }

// run is the delay line's thread. It returns when the wake eventfd is
// written or on an unexpected error.
func (l *line) run() error {
	runtime.LockOSThread() // never unlocked: the thread ends with run
	l.st.tid.Store(int64(unix.Gettid()))
	l.st.errMin.Store(1 << 62)
	l.st.errMax.Store(-1 << 62)
	defer func() {
		l.st.cpuAtExit.Store(int64(l.cpu()))
		l.st.done.Store(true)
	}()
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("delay-line\x00")[0])), 0, 0, 0)
	if l.rtPrio > 0 {
		// Best effort: FIFO priority keeps busy workloads from delaying
		// releases; the kernel's RT throttling still bounds the thread.
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: uint32(l.rtPrio)}
		if unix.SchedSetAttr(0, &attr, 0) == nil {
			l.st.realtime.Store(true)
		}
	}
	// Without this the kernel may add 50 us of slack to every sleep.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("linkemu: PR_SET_TIMERSLACK: %w", err)
	}
	l.scratch = make([]byte, bigBuf)
	fds := []unix.PollFd{{Fd: int32(l.tun), Events: unix.POLLIN}, {Fd: int32(l.wake), Events: unix.POLLIN}}
	var ts unix.Timespec
	// late is a moving average of how late ppoll wakes up; the line wakes
	// that much (and a little) early and spins the rest, at most l.spin.
	late := l.spin / 2
	l.st.ready.Store(true)
	for {
		now := l.now()
		var timeout *unix.Timespec
		var want time.Duration
		if l.n > 0 {
			ahead := min(l.spin, late+late/2+2*time.Microsecond)
			want = l.q[l.head].due - ahead
			if want <= now {
				if err := l.release(); err != nil {
					return err
				}
				continue
			}
			ts = unix.NsecToTimespec(int64(want - now))
			timeout = &ts
		}
		n, err := rawPpoll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("linkemu: ppoll: %w", err)
		}
		if err == nil && n == 0 && timeout != nil { // not on a signal (EINTR)
			late += (l.now() - want - late) / 8
			late = max(late, 0)
		}
		if fds[1].Revents != 0 {
			return nil
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
			return errors.New("linkemu: tun device gone")
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			if err := l.readSome(); err != nil {
				return err
			}
		}
	}
}

// readSome reads up to readBatch packets, stopping early when the head of
// the queue is due.
func (l *line) readSome() error {
	scratch := l.scratch
	defer func() { l.scratch = scratch }()
	for range readBatch {
		n, err := rawRead(l.tun, scratch[:cap(scratch)])
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("linkemu: read tun: %w", err)
		}
		now := l.now()
		if n <= vnetHdrLen {
			continue
		}
		if l.loss > 0 && l.rng.Float64() < l.loss {
			l.st.lost.Add(1)
			continue
		}
		var buf []byte
		if n <= smallBuf {
			buf = l.get(&l.small, smallBuf)[:n]
			copy(buf, scratch[:n])
		} else {
			buf = scratch[:n]
			scratch = l.get(&l.big, bigBuf)
		}
		if l.queued+cap(buf) > maxQueued {
			l.st.overflow.Add(1)
			l.put(buf)
			continue
		}
		l.push(packet{buf: buf, due: now + l.delay})
		if l.q[l.head].due-l.spin <= now {
			break
		}
	}
	return nil
}

// release spins until the head is due, reading the TUN meanwhile so that
// packets arriving during the spin are stamped on time, then writes every
// packet due by now+early.
func (l *line) release() error {
	due := l.q[l.head].due
	now := l.now()
	for now < due {
		if err := l.readSome(); err != nil {
			return err
		}
		now = l.now()
	}
	for l.n > 0 {
		p := l.q[l.head]
		if p.due > now+early {
			return nil
		}
		l.pop()
		_, err := rawWrite(l.tun, p.buf)
		now = l.now()
		if err != nil {
			l.st.writeErrs.Add(1)
		} else {
			e := int64(now - p.due)
			l.st.packets.Add(1)
			l.st.bytes.Add(int64(len(p.buf) - vnetHdrLen))
			l.st.errSum.Add(e)
			l.st.hist[histIndex(time.Duration(e))].Add(1)
			if e > l.st.errMax.Load() {
				l.st.errMax.Store(e)
			}
			if e < l.st.errMin.Load() {
				l.st.errMin.Store(e)
			}
		}
		l.put(p.buf)
	}
	return nil
}

func (l *line) get(free *[][]byte, size int) []byte {
	if k := len(*free); k > 0 {
		b := (*free)[k-1]
		*free = (*free)[:k-1]
		return b[:cap(b)]
	}
	return make([]byte, size)
}

// put keeps every buffer for reuse: the line makes no garbage, so its
// memory is the peak it held (at most maxQueued plus one buffer) and the
// child process can run without the garbage collector.
func (l *line) put(b []byte) {
	if cap(b) > smallBuf {
		l.big = append(l.big, b)
	} else {
		l.small = append(l.small, b)
	}
}

func (l *line) push(p packet) {
	if l.n == len(l.q) {
		nq := make([]packet, max(64, 2*len(l.q)))
		for i := range l.n {
			nq[i] = l.q[(l.head+i)%len(l.q)]
		}
		l.q, l.head = nq, 0
	}
	l.q[(l.head+l.n)%len(l.q)] = p
	l.n++
	l.queued += cap(p.buf)
}

func (l *line) pop() {
	l.queued -= cap(l.q[l.head].buf)
	l.q[l.head] = packet{}
	l.head = (l.head + 1) % len(l.q)
	l.n--
}

// The line's syscalls bypass the Go runtime's syscall bookkeeping
// (entersyscall/exitsyscall). Through unix.Ppoll, the SCHED_FIFO line
// thread on an idle 2-vCPU VM came back from a ppoll tens of
// milliseconds after its timeout now and then, with packets waiting unread
// in the TUN, and far sooner around a raw ppoll ("Measured figures",
// change 6, in docs/lab-link.md has the runs). The wait is in
// exitsyscall, where a thread back from a syscall has to get a P again,
// which can mean waiting for the runtime's normal-priority threads. The
// cost: the thread keeps its P while it sleeps, so sysmon sees a
// long-running goroutine and interrupts the ppoll with a preemption
// signal every 10-20 ms (EINTR, handled) and a stop-the-world in an
// in-process line waits for the signal. The calls never block the runtime otherwise: read and write are
// non-blocking and ppoll returns on the control fd or the signal.
func rawPpoll(fds []unix.PollFd, ts *unix.Timespec) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawRead(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// threadCPU returns the CPU time used so far by thread tid of this process.
func threadCPU(tid int) time.Duration {
	// make_thread_cpuclock(tid, CPUCLOCK_SCHED) from linux/posix-timers.h
	clk := int32(^uint32(tid))<<3 | 2 | 4
	var ts unix.Timespec
	if unix.ClockGettime(clk, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// processCPU returns the CPU time used so far by process pid (any process).
func processCPU(pid int) time.Duration {
	// make_process_cpuclock(pid, CPUCLOCK_SCHED)
	clk := int32(^uint32(pid))<<3 | 2
	var ts unix.Timespec
	if unix.ClockGettime(clk, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

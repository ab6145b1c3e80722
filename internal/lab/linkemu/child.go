// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ChildEnv is set in the environment of a delay-line child process; its
// value carries the line's parameters. A program that passes Params.Exec
// must call ServeLine when it finds ChildEnv set.
const ChildEnv = "TCPDOCTOR_DELAY_LINE"

// File descriptors handed to the child (ExtraFiles start at 3).
const (
	childTun   = 3
	childCtl   = 4 // read end of a pipe; EOF means stop
	childStats = 5 // memfd holding the counters
	statsSize  = 4096
)

// child is a delay line running in its own process.
type child struct {
	cmd    *exec.Cmd
	ctl    *os.File // write end; closing it stops the child
	mem    []byte
	stderr bytes.Buffer
}

func lineSpec(l *line) string {
	return fmt.Sprintf("%d,%d,%g,%d,%d", l.delay, l.spin, l.loss, l.seed, l.rtPrio)
}

// startChild runs the delay line in a child process started with argv. It
// takes over tunFd (closed here either way). The child stops when ctl is
// closed, also when this process dies.
func startChild(argv []string, ln *line, tunFd int) (_ *child, err error) {
	tun := os.NewFile(uintptr(tunFd), "tun")
	defer tun.Close()
	if unsafe.Sizeof(counters{}) > statsSize {
		return nil, errors.New("linkemu: counters larger than their shared page")
	}
	mfd, err := unix.MemfdCreate("tcpdoctor-delay-line", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("linkemu: memfd: %w", err)
	}
	memf := os.NewFile(uintptr(mfd), "stats")
	defer memf.Close()
	if err := unix.Ftruncate(mfd, statsSize); err != nil {
		return nil, fmt.Errorf("linkemu: memfd size: %w", err)
	}
	mem, err := unix.Mmap(mfd, 0, statsSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("linkemu: mmap stats: %w", err)
	}
	c := &child{mem: mem}
	defer func() {
		if err != nil {
			unix.Munmap(mem)
		}
	}()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("linkemu: pipe: %w", err)
	}
	defer pr.Close()
	c.ctl = pw
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Env = append(os.Environ(), ChildEnv+"="+lineSpec(ln))
	c.cmd.ExtraFiles = []*os.File{tun, pr, memf}
	c.cmd.Stderr = &c.stderr
	// Its own process group: a Ctrl-C at the terminal reaches the parent,
	// which stops the line through the pipe after it is done with it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("linkemu: start delay line %s: %w", argv[0], err)
	}
	ln.st = (*counters)(unsafe.Pointer(&mem[0]))
	pid := c.cmd.Process.Pid
	ln.cpu = func() time.Duration { return processCPU(pid) }
	return c, nil
}

// stop closes the control pipe, waits for the child (killing it after
// timeout) and reports how it ended.
func (c *child) stop(timeout time.Duration) error {
	c.ctl.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		c.cmd.Process.Kill() // our own child, by pid
		err = <-done
		err = fmt.Errorf("killed after %v: %w", timeout, err)
	}
	if err != nil {
		return fmt.Errorf("linkemu: delay line process: %w: %s", err, strings.TrimSpace(c.stderr.String()))
	}
	return nil
}

// release copies the child's final counters to the heap, points ln at the
// copy and unmaps the shared page. Call it after stop.
func (c *child) release(ln *line) {
	if c.mem == nil {
		return
	}
	st := new(counters)
	src := ln.st
	st.tid.Store(src.tid.Load())
	st.packets.Store(src.packets.Load())
	st.bytes.Store(src.bytes.Load())
	st.lost.Store(src.lost.Load())
	st.overflow.Store(src.overflow.Load())
	st.writeErrs.Store(src.writeErrs.Load())
	st.errSum.Store(src.errSum.Load())
	st.errMax.Store(src.errMax.Load())
	st.errMin.Store(src.errMin.Load())
	st.cpuAtExit.Store(src.cpuAtExit.Load())
	st.done.Store(true)
	st.realtime.Store(src.realtime.Load())
	st.ready.Store(src.ready.Load())
	for i := range st.hist {
		st.hist[i].Store(src.hist[i].Load())
	}
	ln.st = st
	unix.Munmap(c.mem)
	c.mem = nil
}

// PingEnv is set in the environment of a ping-pong child (link-bench
// with an Exec); its value is "interval,duration,rtt" in nanoseconds.
const PingEnv = "TCPDOCTOR_LINK_PING"

// IsChild tells whether this process was started as a delay-line or
// ping-pong child; such a process must call ServeLine.
func IsChild() bool { return os.Getenv(ChildEnv) != "" || os.Getenv(PingEnv) != "" }

// pingChild runs pingPong in a child process (argv as for Params.Exec):
// a process of its own keeps the measuring threads clear of this one's
// goroutines. The sockets stay open here.
func pingChild(ctx context.Context, argv []string, cli, srv int, interval, duration, rtt time.Duration) (int, []time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%d", PingEnv, interval, duration, rtt))
	// Duplicates, so that closing the Files leaves the caller's fds alone.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, fd := range []int{cli, srv} {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0, nil, fmt.Errorf("linkemu: dup socket: %w", err)
		}
		files = append(files, os.NewFile(uintptr(d), "socket"))
	}
	cmd.ExtraFiles = files
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // see startChild
	err := cmd.Run()
	if ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("linkemu: ping-pong process: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parsePingOutput(out.String())
}

// parsePingOutput reads "sent N" and then one RTT error (ns) per line.
func parsePingOutput(s string) (int, []time.Duration, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sent, err := strconv.Atoi(strings.TrimPrefix(lines[0], "sent "))
	if err != nil || !strings.HasPrefix(lines[0], "sent ") {
		return 0, nil, fmt.Errorf("linkemu: ping-pong output %q: want sent N", lines[0])
	}
	out := make([]time.Duration, 0, len(lines)-1)
	for _, l := range lines[1:] {
		v, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("linkemu: ping-pong output %q: %w", l, err)
		}
		out = append(out, time.Duration(v))
	}
	return sent, out, nil
}

// spareProcs gives a child more Ps than it has busy threads: a thread
// coming back from a syscall then always finds one idle and never waits
// for the scheduler's normal-priority threads.
func spareProcs() { runtime.GOMAXPROCS(max(8, runtime.NumCPU())) }

// parseLineSpec reads the line parameters a child gets in ChildEnv.
func parseLineSpec(spec string) (*line, error) {
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		return nil, fmt.Errorf("linkemu: %s=%q: want delay,spin,loss,seed,prio", ChildEnv, spec)
	}
	delay, err1 := strconv.ParseInt(f[0], 10, 64)
	spin, err2 := strconv.ParseInt(f[1], 10, 64)
	loss, err3 := strconv.ParseFloat(f[2], 64)
	seed, err4 := strconv.ParseUint(f[3], 10, 64)
	prio, err5 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, fmt.Errorf("linkemu: %s: %w", ChildEnv, err)
	}
	p := Params{RTT: 2 * time.Duration(delay), Spin: time.Duration(spin), Loss: loss}
	if err := p.validate(); err != nil || spin < 0 || prio < 0 || prio > 99 {
		return nil, fmt.Errorf("linkemu: %s=%q: out of range", ChildEnv, spec)
	}
	ln := newLine(time.Duration(delay), time.Duration(spin), loss, seed)
	ln.rtPrio = prio
	return ln, nil
}

func parsePingSpec(spec string) (iv, du, rtt time.Duration, err error) {
	if _, err := fmt.Sscanf(spec, "%d,%d,%d", &iv, &du, &rtt); err != nil || iv < 100*time.Microsecond || du < 0 || du > MaxBenchDuration || rtt < 0 || rtt > MaxRTT {
		return 0, 0, 0, fmt.Errorf("linkemu: %s=%q: want interval,duration,rtt in ns", PingEnv, spec)
	}
	return iv, du, rtt, nil
}

func servePing(spec string) error {
	iv, du, rtt, err := parsePingSpec(spec)
	if err != nil {
		return err
	}
	spareProcs()
	sent, samples, err := pingPong(context.Background(), 3, 4, iv, du, rtt)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "sent %d\n", sent)
	for _, v := range samples {
		fmt.Fprintf(w, "%d\n", int64(v))
	}
	return w.Flush()
}

// ServeLine runs the child side: the delay line of a process started by
// Start with Params.Exec (it returns when the parent closes the control
// pipe), or link-bench's ping-pong.
func ServeLine() error {
	if spec := os.Getenv(PingEnv); spec != "" {
		return servePing(spec)
	}
	ln, err := parseLineSpec(os.Getenv(ChildEnv))
	if err != nil {
		return err
	}
	spareProcs()
	if err := unix.SetNonblock(childTun, true); err != nil {
		return fmt.Errorf("linkemu: tun fd: %w", err)
	}
	mem, err := unix.Mmap(childStats, 0, statsSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("linkemu: mmap stats: %w", err)
	}
	// The line allocates only while its pool grows (see put): without the
	// collector no stop-the-world, which needs the runtime's other,
	// normal-priority threads, can stall the SCHED_FIFO thread.
	debug.SetGCPercent(-1)
	ln.tun, ln.wake = childTun, childCtl
	ln.st = (*counters)(unsafe.Pointer(&mem[0]))
	ln.cpu = func() time.Duration { return processCPU(os.Getpid()) }
	return ln.run()
}

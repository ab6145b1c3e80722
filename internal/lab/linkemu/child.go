package linkemu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
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

// ServeLine runs the delay line of a child process started by Start with
// Params.Exec. It returns when the parent closes the control pipe.
func ServeLine() error {
	f := strings.Split(os.Getenv(ChildEnv), ",")
	if len(f) != 5 {
		return fmt.Errorf("linkemu: %s=%q: want delay,spin,loss,seed,prio", ChildEnv, os.Getenv(ChildEnv))
	}
	delay, err1 := strconv.ParseInt(f[0], 10, 64)
	spin, err2 := strconv.ParseInt(f[1], 10, 64)
	loss, err3 := strconv.ParseFloat(f[2], 64)
	seed, err4 := strconv.ParseUint(f[3], 10, 64)
	prio, err5 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return fmt.Errorf("linkemu: %s: %w", ChildEnv, err)
	}
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
	ln := newLine(time.Duration(delay), time.Duration(spin), loss, seed)
	ln.tun, ln.wake = childTun, childCtl
	ln.rtPrio = min(max(prio, 0), 99)
	ln.st = (*counters)(unsafe.Pointer(&mem[0]))
	ln.cpu = func() time.Duration { return processCPU(os.Getpid()) }
	return ln.run()
}

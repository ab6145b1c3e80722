package sockdiag

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Bytecode port comparisons (include/uapi/linux/inet_diag.h).
const (
	bcSGE = 2 // INET_DIAG_BC_S_GE
	bcSLE = 3 // INET_DIAG_BC_S_LE
	bcDGE = 4 // INET_DIAG_BC_D_GE
	bcDLE = 5 // INET_DIAG_BC_D_LE
)

// SplitPort divides a split dump: a socket with either port at or above
// it goes to the first half, the rest to the second. It is the middle of
// Linux's default ephemeral range (32768-60999), so the connections of a
// host fall into the halves by their ephemeral end, which the kernel
// spreads over the range, whichever side opened them; listeners and
// connections between two low ports all go to the second half.
const SplitPort = 46884

// splitPrograms are the two halves' bytecode: "sport >= p or dport >= p"
// and its complement "sport < p and dport < p". The kernel's audit follows
// each op's "yes" to the next one, and every jump lands on that chain or
// past the end (accept at the end, reject 4 bytes past it).
func splitPrograms(p uint16) (high, low []byte) {
	// high: 0 S_GE p (yes: 8, no: 12 -> D_GE); 8 JMP to the end (accept);
	// 12 D_GE p (yes: the end, accept; no: past it, reject). 20 bytes.
	high = appendOp(nil, bcSGE, 8, 12)
	high = append(high, portCond(0, p).operand...)
	high = appendOp(high, bcJmp, opLen, 12)
	high = appendOp(high, bcDGE, 8, 12)
	high = append(high, portCond(0, p).operand...)
	// low: 0 S_LE p-1 (yes: 8; no: reject); 8 D_LE p-1 (yes: the end,
	// accept; no: reject). 16 bytes.
	low = appendOp(nil, bcSLE, 8, 20)
	low = append(low, portCond(0, p-1).operand...)
	low = appendOp(low, bcDLE, 8, 12)
	low = append(low, portCond(0, p-1).operand...)
	return high, low
}

// dumpSplit dumps in two halves at once (splitPrograms), each over a
// netlink socket of its own received ahead on its own goroutine, so the
// kernel fills both on the two CPUs while the caller decodes. The
// halves' datagrams are decoded alternately, one of each, so the order of
// the sockets depends only on the sockets, as a whole dump's does. It
// reports false, with nothing delivered, where the kernel refuses the
// compat request or the bytecode: the caller dumps whole instead.
func dumpSplit(fds [2]int, opts Options, fn func(*snapshot.Socket) error) (bool, error) {
	high, low := splitPrograms(SplitPort)
	var reuse *full
	if opts.Reuse {
		reuse = new(full)
	}
	type half struct {
		next  func() ([]byte, int, error)
		give  func([]byte)
		stop  func()
		seq   uint32
		base  int
		done  bool
		name  string
		first bool
	}
	var halves [2]*half
	defer func() {
		for _, h := range halves {
			if h != nil {
				h.stop()
			}
		}
	}()
	for i, bc := range [][]byte{high, low} {
		seq := uint32(i + 1)
		if err := unix.Sendto(fds[i], compatRequest(seq, opts, bc), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return true, fmt.Errorf("sockdiag: split dump: send request: %w", err)
		}
		h := &half{seq: seq, name: [2]string{"ports >= 46884", "ports < 46884"}[i], first: true}
		h.next, h.give, h.stop = readAhead(fds[i], make([]byte, recvBufLen), seq)
		halves[i] = h
	}
	delivered := false
	for live := 2; live > 0; {
		for _, h := range halves {
			if h.done {
				continue
			}
			b, n, err := h.next()
			if err == nil && n > len(b) {
				err = fmt.Errorf("offset %d: datagram of %d bytes truncated to %d", h.base, n, len(b))
			}
			if err == nil && n == 0 {
				err = fmt.Errorf("offset %d: %w: empty datagram", h.base, errShortMsg)
			}
			var done bool
			if err == nil {
				done, err = parseDumpInto(b[:n], h.seq, h.base, reuse, func(sk *snapshot.Socket) error {
					delivered = true
					if err := fn(sk); err != nil {
						return &fnError{err}
					}
					return nil
				})
			}
			h.give(b)
			if err != nil {
				var ferr *fnError
				if errors.As(err, &ferr) {
					return true, ferr.err
				}
				if !delivered && h.first && refused(err) {
					return false, nil
				}
				return true, fmt.Errorf("sockdiag: dump AF_UNSPEC (%s): %w", h.name, err)
			}
			h.first = false
			h.base += n
			if done {
				h.done = true
				live--
			}
		}
	}
	return true, nil
}

// fnError marks an error returned by the caller's fn, to pass on as is.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// refused reports whether err is the kernel declining a request it does
// not know (an older kernel): not a failure of the dump.
func refused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT)
}

// splits reports whether Dump splits with opts.
func splits(opts Options) bool {
	return opts.Split && opts.OneWalk && opts.Families == nil && opts.Filter.Empty() && runtime.GOMAXPROCS(0) > 1
}

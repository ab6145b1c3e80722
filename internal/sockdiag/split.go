// SPDX-License-Identifier: Apache-2.0

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

// SplitPort divides a split dump: a socket goes to the first half when
// exactly one of its ports is at or above it, to the second otherwise
// (HalfOf). It is the middle of Linux's default ephemeral range
// (32768-60999). A connection with one fixed port (a server's or the
// service a client calls) falls into the halves by its ephemeral end,
// which the kernel spreads over the range, and one with two ephemeral
// ends (a proxy's or a test's loopback pairs) by whether they sit on the
// same side of the middle, which is as even.
const SplitPort = 46884

// HalfOf is the half of a split dump a socket with these ports comes in.
func HalfOf(local, remote uint16) int {
	if (local >= SplitPort) != (remote >= SplitPort) {
		return 0
	}
	return 1
}

// splitPrograms are the two halves' bytecode: "(sport >= p) != (dport >=
// p)" and its complement. The kernel's audit follows each op's "yes" to
// the next one, and every jump lands on that chain or past the end
// (accept at the end, reject 4 bytes past it).
func splitPrograms(p uint16) (first, second []byte) {
	// 0 S_GE p (yes: 8; no: 20); 8 D cond (yes: 16; no: reject);
	// 16 JMP to the end (accept); 20 D cond (yes: the end, accept; no:
	// reject). 28 bytes.
	half := func(dHigh, dLow cond) []byte {
		const total = 28
		b := appendOp(nil, bcSGE, 8, 20)
		b = append(b, portCond(0, p).operand...)
		b = appendOp(b, dHigh.code, 8, total+opLen-8)
		b = append(b, dHigh.operand...)
		b = appendOp(b, bcJmp, opLen, total-16)
		b = appendOp(b, dLow.code, 8, total+opLen-20)
		return append(b, dLow.operand...)
	}
	below, atOrAbove := portCond(bcDLE, p-1), portCond(bcDGE, p)
	// sport >= p: the first half wants dport < p, the second dport >= p;
	// sport < p: the other way round.
	return half(below, atOrAbove), half(atOrAbove, below)
}

// dumpSplit dumps in two halves at once (splitPrograms), each over a
// netlink socket of its own received ahead on its own goroutine, so the
// kernel fills both on the two CPUs while the caller decodes. The
// halves' datagrams are decoded alternately, one of each; fn is told
// each socket's half (0 or 1, as HalfOf), and each half comes in the
// kernel's table order. Requests are numbered seq+1 and seq+2. It
// reports false, with nothing delivered, where the kernel refuses the
// compat request or the bytecode: the caller dumps whole instead.
func dumpSplit(fds [2]int, seq uint32, opts Options, fn func(int, *snapshot.Socket) error) (bool, error) {
	first, second := splitPrograms(SplitPort)
	var reuse *full
	if opts.Reuse {
		reuse = new(full)
	}
	type half struct {
		next  func() ([]byte, int, error)
		give  func([]byte)
		stop  func()
		seq   uint32
		half  int
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
	for i, bc := range [][]byte{first, second} {
		seq := seq + uint32(i) + 1
		if err := unix.Sendto(fds[i], compatRequest(seq, opts, bc), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return true, fmt.Errorf("sockdiag: split dump: send request: %w", err)
		}
		h := &half{seq: seq, half: i, name: [2]string{"first half", "second half"}[i], first: true}
		h.next, h.give, h.stop = readAhead(fds[i], recvBufLen, seq)
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
					if err := fn(h.half, sk); err != nil {
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

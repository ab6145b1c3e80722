// SPDX-License-Identifier: Apache-2.0

// Package sockdiag dumps TCP sockets through NETLINK_SOCK_DIAG (inet_diag),
// decoding each reply as it arrives.
package sockdiag

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Options selects what Dump asks for.
type Options struct {
	Families []uint8 // unix.AF_INET, unix.AF_INET6; nil = both
	States   uint32  // bitmask of 1<<state; 0 = all states
	Info     bool    // request INET_DIAG_INFO (tcp_info) and INET_DIAG_CONG
	Mem      bool    // request INET_DIAG_SKMEMINFO
	// Filter, when not empty, is run by the kernel on each socket
	// (INET_DIAG_REQ_BYTECODE) so only matching ones are sent.
	Filter *Filter
	// Reuse hands fn the same Socket (and Info, Mem, Shutdown) for every
	// socket of a dump: valid only during the call, nothing allocated per
	// socket. For callers that stream sockets out rather than keep them.
	Reuse bool
	// OneWalk, with Families nil, dumps both families in one walk of the
	// kernel's TCP tables (the inet_diag compat request, family
	// AF_UNSPEC) instead of one walk per family: the tables hold every
	// namespace's sockets, so the second walk costs as much as the first
	// even where there is no IPv6 socket. Sockets come in table order, the
	// families mixed. Where the kernel refuses it, Dump walks per family.
	OneWalk bool
	// Split, with OneWalk, no Filter and more than one CPU, dumps in two
	// halves at once, split by port (SplitPort, HalfOf), each on a
	// netlink socket of its own: the kernel's per-socket work then runs
	// on two CPUs, and each half walks the whole table. fn still runs on
	// the calling goroutine, one socket at a time. The extra walk of the
	// table pays back only in a big namespace (collect.Options.SplitMin).
	Split bool
}

// recvBufLen is the receive buffer. The kernel fills at most about 32 KiB
// per dump datagram (netlink_recvmsg caps max_recvmsg_len; measured 32376
// bytes on 6.18), so more only guards against a kernel raising that cap.
// SO_RCVBUF is left alone: the kernel fills the next datagram during each
// recv, one at a time, so a larger socket buffer does not help a dump.
const recvBufLen = 64 << 10

// Dump opens a NETLINK_SOCK_DIAG socket in the calling thread's network
// namespace, dumps TCP sockets of each family, and calls fn for each. fn
// receives a *snapshot.Socket that it may keep (fresh each call). A
// truncated or malformed reply is an error naming the family and offset;
// sockets already delivered stay delivered. An error from fn stops the dump
// and is returned as is. fn runs on the calling goroutine, one socket at a
// time. To dump another namespace, lock the OS thread and setns before
// calling Dump; the thread matters only while the socket is opened.
//
// What the kernel reports (Linux 6.18), faithfully passed on: request
// sockets (NEW_SYN_RECV) come as SynRecv, for States bit SynRecv or
// NewSynRecv; sockets only bound (the BoundInactive bit, included when
// States is 0) come as Close. TIME_WAIT and request sockets carry no
// tcp_info, meminfo, cc or shutdown, and inode 0.
func Dump(opts Options, fn func(*snapshot.Socket) error) error {
	fd, err := openSocket()
	if err != nil {
		return err
	}
	// A Conn without Open's room for lookup replies.
	c := &Conn{fd: fd, buf: make([]byte, recvBufLen)}
	defer c.Close()
	if splits(opts) {
		// The second socket is opened here too: a netlink socket belongs
		// to the namespace of the thread that opens it.
		if err := c.OpenHalf(); err != nil {
			return err
		}
	}
	_, err = c.DumpHalves(opts, func(_ int, sk *snapshot.Socket) error { return fn(sk) })
	return err
}

// openSocket opens and binds a NETLINK_SOCK_DIAG socket in the calling
// thread's network namespace.
func openSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sockdiag: open netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("sockdiag: bind netlink socket: %w", err)
	}
	return fd, nil
}

// dumpFamilies dumps every family opts asks for over fd, numbering the
// requests from *seq on.
func dumpFamilies(fd int, buf []byte, seq *uint32, opts Options, fn func(*snapshot.Socket) error) error {
	fams := opts.Families
	if fams == nil {
		fams = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	bc, err := opts.Filter.Bytecode()
	if err != nil {
		return err
	}
	var reuse *full
	if opts.Reuse {
		reuse = new(full)
	}
	var fnErr error
	call := func(sk *snapshot.Socket) error {
		if err := fn(sk); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	if opts.OneWalk && opts.Families == nil {
		*seq++
		delivered := false
		err := dumpFamily(fd, buf, compatRequest(*seq, opts, bc), *seq, reuse, func(sk *snapshot.Socket) error {
			delivered = true
			return call(sk)
		})
		if fnErr != nil {
			return fnErr
		}
		if err == nil || delivered || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT)) {
			if err != nil {
				return fmt.Errorf("sockdiag: dump AF_UNSPEC: %w", err)
			}
			return nil
		}
		// A kernel without the compat request: one walk per family.
	}
	for _, fam := range fams {
		*seq++
		err := dumpFamily(fd, buf, request(fam, *seq, opts, bc), *seq, reuse, call)
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return fmt.Errorf("sockdiag: dump %s: %w", familyName(fam), err)
		}
	}
	return nil
}

// request builds an inet_diag_req_v2 dump request for TCP sockets, with
// bytecode bc (compiled opts.Filter) as INET_DIAG_REQ_BYTECODE when set.
func request(family uint8, seq uint32, opts Options, bc []byte) []byte {
	b, r := dumpRequest(sockDiagByFam, diagReqLen, seq, bc)
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	r[2] = dumpExt(opts)
	ne.PutUint32(r[4:], dumpStates(opts))
	// id is left zero: no filter; cookie INET_DIAG_NOCOOKIE is not needed for dumps.
	return b
}

// compatRequest builds a struct inet_diag_req (TCPDIAG_GETSOCK) dump
// request: the kernel answers it for both families in one walk, with
// replies of that type.
func compatRequest(seq uint32, opts Options, bc []byte) []byte {
	b, r := dumpRequest(tcpdiagGetSock, compatReqLen, seq, bc)
	r[0] = unix.AF_UNSPEC
	r[3] = dumpExt(opts)
	ne.PutUint32(r[52:], dumpStates(opts)) // after the 48-byte inet_diag_sockid
	return b
}

// dumpRequest builds a dump request of type typ with a zeroed body of
// bodyLen bytes, followed by bc as INET_DIAG_REQ_BYTECODE when set, and
// returns it and its body to fill in.
func dumpRequest(typ uint16, bodyLen int, seq uint32, bc []byte) (b, body []byte) {
	n := nlmsgHdrLen + bodyLen
	if len(bc) > 0 {
		n += rtaHdrLen + len(bc)
	}
	b = make([]byte, n)
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(b[8:], seq)
	if len(bc) > 0 {
		a := b[nlmsgHdrLen+bodyLen:]
		ne.PutUint16(a[0:], uint16(rtaHdrLen+len(bc)))
		ne.PutUint16(a[2:], attrReqBytecode)
		copy(a[rtaHdrLen:], bc)
	}
	return b, b[nlmsgHdrLen : nlmsgHdrLen+bodyLen]
}

// dumpExt is the idiag_ext bits a dump asks for: a lookup's, and the
// congestion control name with tcp_info.
func dumpExt(opts Options) uint8 {
	ext := lookupExt(opts)
	if opts.Info {
		ext |= 1 << (attrCong - 1)
	}
	return ext
}

// dumpStates is the idiag_states a dump asks for: every state when
// opts.States is 0.
func dumpStates(opts Options) uint32 {
	if opts.States == 0 {
		return ^uint32(0)
	}
	return opts.States
}

// dumpFamily sends req and streams the reply through parseDump (into
// reuse when not nil). With more than one CPU the datagrams are received
// ahead on another goroutine (readAhead): the kernel builds the next one
// during each recv, so its work overlaps the decoding of the last.
func dumpFamily(fd int, buf, req []byte, seq uint32, reuse *full, fn func(*snapshot.Socket) error) error {
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	next := func() ([]byte, int, error) { n, err := recvTrunc(fd, buf); return buf, n, err }
	give := func([]byte) {}
	if runtime.GOMAXPROCS(0) > 1 {
		var stop func()
		next, give, stop = readAhead(fd, len(buf), seq)
		defer stop()
	}
	base := 0
	for {
		b, n, err := next()
		if err != nil {
			return fmt.Errorf("offset %d: recv: %w", base, err)
		}
		if n > len(b) {
			return fmt.Errorf("offset %d: datagram of %d bytes truncated to %d", base, n, len(b))
		}
		if n == 0 {
			return fmt.Errorf("offset %d: %w: empty datagram", base, errShortMsg)
		}
		done, err := parseDumpInto(b[:n], seq, base, reuse, fn)
		give(b)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		base += n
	}
}

// aheadBufs is how many buffers readAhead holds: received, being
// decoded, or free.
const aheadBufs = 4

// aheadBatch is how many datagrams of the largest size (the caller's
// buffer) one of readAhead's buffers holds; it takes more of the usual,
// smaller ones. Handed over one at a time, the decoding goroutine, faster
// than the kernel fills a datagram, waited for each and its thread was
// parked and woken once a datagram: a context switch per 50 sockets, and
// in a `check` at a million sockets about 0.2 s more system CPU and a
// longer wall (docs/performance-history.md, "Where the last targets
// stand").
const aheadBatch = 4

// readAhead receives fd's dump datagrams, of at most dgram bytes, on its
// own goroutine into aheadBufs buffers of aheadBatch times dgram, each
// handed over once a datagram of dgram no longer fits, or at the end of
// the dump. next returns the next buffer and the length received into
// it, or the recv error; give returns a buffer once decoded; stop ends
// the goroutine and waits for it, whether or not the dump was read to its
// end. A datagram that is empty, truncated (longer than dgram) or a recv
// error comes alone, after the datagrams before it, in a buffer of dgram
// bytes, so the caller's checks see it as one. The goroutine stops after
// a datagram that ends the dump for seq (endsDump), so it never waits on
// a recv that no datagram will answer; stopped early, it only finishes
// the recv in progress, which the dump still under way answers.
func readAhead(fd, dgram int, seq uint32) (next func() ([]byte, int, error), give func([]byte), stop func()) {
	type chunk struct {
		b   []byte
		n   int
		err error
	}
	// One more than the buffers: an odd datagram's own buffer.
	free := make(chan []byte, aheadBufs+1)
	got := make(chan chunk, aheadBufs+1)
	for range aheadBufs {
		free <- make([]byte, dgram*aheadBatch)
	}
	var quit atomic.Bool
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		defer close(got)
		for {
			b := <-free
			if quit.Load() {
				return
			}
			n := 0
			for len(b)-n >= dgram {
				m, err := recvTrunc(fd, b[n:n+dgram])
				if err != nil || m == 0 || m > dgram {
					if n > 0 {
						got <- chunk{b, n, nil}
						b = make([]byte, dgram)
					} else {
						b = b[:dgram]
					}
					got <- chunk{b, m, err}
					return
				}
				end := endsDump(b[n:n+m], seq)
				n += m
				if end {
					got <- chunk{b, n, nil}
					return
				}
			}
			got <- chunk{b, n, nil}
		}
	}()
	next = func() ([]byte, int, error) {
		c, ok := <-got
		if !ok {
			return nil, 0, fmt.Errorf("%w: the dump ended without NLMSG_DONE", errShortMsg)
		}
		return c.b, c.n, c.err
	}
	give = func(b []byte) {
		select {
		case free <- b[:cap(b)]:
		default: // the odd datagram's buffer, once the rest are back
		}
	}
	stop = func() {
		quit.Store(true)
		for c := range got { // unblock a goroutine waiting for a free buffer
			select {
			case free <- c.b[:cap(c.b)]:
			default:
			}
		}
		<-exited
	}
	return next, give, stop
}

// endsDump reports whether datagram b ends the dump for seq as
// parseDumpInto reads it (NLMSG_DONE, or an NLMSG_ERROR that is not an
// ACK), or is malformed where parseDumpInto would stop: after it, the
// kernel sends nothing more for this request.
func endsDump(b []byte, seq uint32) bool {
	for off := 0; off < len(b); {
		if len(b)-off < nlmsgHdrLen {
			return true
		}
		mlen := int(ne.Uint32(b[off:]))
		if mlen < nlmsgHdrLen || mlen > len(b)-off {
			return true
		}
		if ne.Uint32(b[off+8:]) == seq {
			switch ne.Uint16(b[off+4:]) {
			case nlmsgDone:
				return true
			case nlmsgError:
				if mlen < nlmsgHdrLen+4 || ne.Uint32(b[off+nlmsgHdrLen:]) != 0 {
					return true
				}
			}
		}
		off += (mlen + 3) &^ 3
	}
	return false
}

// recvTrunc receives one datagram without allocating and returns its real
// length (MSG_TRUNC), which exceeds len(buf) when it did not fit.
func recvTrunc(fd int, buf []byte) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_TRUNC, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

func familyName(f uint8) string {
	switch f {
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	}
	return fmt.Sprintf("family %d", f)
}

// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Conn is a NETLINK_SOCK_DIAG socket kept open for repeated requests, as
// a sampler running many times a second needs. It belongs to the network
// namespace of the thread that opened it. Not safe for concurrent use.
type Conn struct {
	fd  int
	buf []byte
	seq uint32
	req []byte
	// Lookup replies are received many datagrams per syscall (recvmmsg)
	// into slots of one buffer.
	slots []byte
	iovs  []unix.Iovec
	msgs  []unix.Mmsghdr
	// d and f are reused for every lookup reply.
	d decoded
	f full
	// fd2, when not 0, is the socket a split dump's second half comes
	// over (OpenHalf).
	fd2 int
	// served is when the last lookup batch's sendmsg returned.
	served time.Time
	// Now is the clock Served reads; nil: time.Now. A sampler sets its
	// own, so that the two agree.
	Now func() time.Time
}

// slotLen holds one lookup reply: inet_diag_msg, tcp_info, meminfo and
// the congestion control name take under 600 bytes on 6.18.
const slotLen = 2048

// lookupRcvBuf holds the replies of one batch of exact lookups: each is
// its own datagram of about 1 KiB of skb truesize per socket.
const lookupRcvBuf = 4 << 20

// lookupBatch is how many exact requests go in one sendmsg.
const lookupBatch = 64

// Open opens a Conn in the calling thread's network namespace.
func Open() (*Conn, error) {
	fd, err := openSocket()
	if err != nil {
		return nil, err
	}
	// Room for a batch of lookup replies; FORCE needs CAP_NET_ADMIN and
	// the plain one is capped by rmem_max, which is enough for smaller
	// batches.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, lookupRcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, lookupRcvBuf)
	}
	return &Conn{fd: fd, buf: make([]byte, recvBufLen)}, nil
}

// OpenHalf opens a second socket, for DumpHalves to dump in two halves
// at once; call it, like Open, in the namespace to dump.
func (c *Conn) OpenHalf() error {
	if c.fd2 != 0 {
		return nil
	}
	fd, err := openSocket()
	if err != nil {
		return err
	}
	c.fd2 = fd
	return nil
}

// Close closes the socket (both, after OpenHalf).
func (c *Conn) Close() error {
	c.closeHalf()
	return unix.Close(c.fd)
}

func (c *Conn) closeHalf() {
	if c.fd2 != 0 {
		unix.Close(c.fd2)
		c.fd2 = 0
	}
}

// Dump is the package's Dump over this Conn's socket, whole.
func (c *Conn) Dump(opts Options, fn func(*snapshot.Socket) error) error {
	return dumpFamilies(c.fd, c.buf, &c.seq, opts, fn)
}

// DumpHalves is Dump, in two halves at once when OpenHalf succeeded and
// opts.Split allows it (Options.Split): fn is told each socket's half (0
// or 1, as HalfOf), and each half comes in the kernel's table order, the
// two interleaved. split reports whether it was; a whole dump gives
// every socket half 0. Where the kernel refuses the split request the
// dump is whole, and later ones too.
func (c *Conn) DumpHalves(opts Options, fn func(half int, sk *snapshot.Socket) error) (split bool, err error) {
	if c.fd2 != 0 && splits(opts) {
		ok, err := dumpSplit([2]int{c.fd, c.fd2}, c.seq, opts, fn)
		c.seq += 2
		if ok {
			return true, err
		}
		// Refused before anything was delivered; the first socket read
		// its refusal, the second may still hold one: closed.
		c.closeHalf()
	}
	return false, c.Dump(opts, func(sk *snapshot.Socket) error { return fn(0, sk) })
}

// Key names one connection for an exact lookup: as the dump reported it.
type Key struct {
	Family  uint8
	Local   snapshot.Endpoint
	Remote  snapshot.Endpoint
	IfIndex uint32
	Cookie  uint64
}

// KeyOf returns the key of a dumped socket.
func KeyOf(sk *snapshot.Socket) Key {
	return Key{Family: sk.Family, Local: sk.Local, Remote: sk.Remote, IfIndex: sk.IfIndex, Cookie: sk.Cookie}
}

// Lookup asks for each key's socket by its 4-tuple and cookie: the kernel
// finds each in its hash table, so the cost does not grow with the other
// sockets of the namespace, unlike a dump. fn gets the key's index and the
// socket, which is reused: valid only during the call, copy what is kept.
// Keys whose socket is gone (or whose tuple now belongs to another
// socket) are skipped. opts.Info and opts.Mem choose the extras; the
// congestion control name is never asked for (the dump that found the
// socket told it), which spares the kernel a string per reply.
func (c *Conn) Lookup(opts Options, keys []Key, fn func(int, *snapshot.Socket) error) error {
	return c.lookup(lookupExt(opts), keys, fn)
}

// Served is when the kernel had answered the lookup batch whose replies
// fn is being given: it fills every reply inside the batch's sendmsg
// (tcp_info under the socket lock, which a writer may hold), so the time
// sendmsg returned dates the readings better than any time taken around
// the receive.
func (c *Conn) Served() time.Time { return c.served }

// lookupExt is the idiag_ext bits a lookup asks for.
func lookupExt(opts Options) uint8 {
	var ext uint8
	if opts.Info {
		ext |= 1 << (attrInfo - 1)
	}
	if opts.Mem {
		ext |= 1 << (attrSkMemInfo - 1)
	}
	return ext
}

func (c *Conn) lookup(ext uint8, keys []Key, fn func(int, *snapshot.Socket) error) error {
	for start := 0; start < len(keys); start += lookupBatch {
		end := min(start+lookupBatch, len(keys))
		if err := c.lookupBatch(ext, keys[start:end], start, fn); err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) lookupBatch(ext uint8, keys []Key, base int, fn func(int, *snapshot.Socket) error) error {
	first := c.seq + 1
	c.req = c.req[:0]
	for _, k := range keys {
		c.seq++
		c.req = appendExact(c.req, k, c.seq, ext)
	}
	if err := unix.Sendto(c.fd, c.req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sockdiag: lookup: send: %w", err)
	}
	if c.Now != nil {
		c.served = c.Now()
	} else {
		c.served = time.Now()
	}
	c.ensureSlots()
	left := len(keys)
	for left > 0 {
		n, err := c.recvmmsg(left)
		if err != nil {
			return fmt.Errorf("sockdiag: lookup: recv: %w", err)
		}
		for k := 0; k < n; k++ {
			if c.msgs[k].Hdr.Flags&unix.MSG_TRUNC != 0 {
				return fmt.Errorf("sockdiag: lookup: %w: reply longer than %d bytes", errShortMsg, slotLen)
			}
			b := c.slots[k*slotLen : k*slotLen+int(c.msgs[k].Len)]
			got, err := walkLookup(b, first, len(keys), func(i int, sk *snapshot.Socket) error { return fn(base+i, sk) }, c.decodeShared)
			left -= got
			if err != nil {
				var ke *keyError
				if errors.As(err, &ke) {
					return fmt.Errorf("sockdiag: lookup %v -> %v: %w", keys[ke.idx].Local, keys[ke.idx].Remote, ke.errno)
				}
				return err
			}
		}
	}
	return nil
}

// keyError is the kernel's error for the lookup of one key.
type keyError struct {
	idx   int
	errno syscall.Errno
}

func (e *keyError) Error() string { return fmt.Sprintf("lookup %d: %v", e.idx, e.errno) }

// walkLookup walks one datagram of replies to a batch of n exact lookups
// whose first request had seq first. It passes fn each socket found, with
// its index in the batch, and counts the replies, found or not (ENOENT:
// the socket is gone); replies to other requests are skipped. decode
// turns a reply into a socket.
func walkLookup(b []byte, first uint32, n int, fn func(int, *snapshot.Socket) error, decode func([]byte) (*snapshot.Socket, error)) (replies int, err error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("sockdiag: lookup: %w: empty datagram", errShortMsg)
	}
	for off := 0; off < len(b); {
		if len(b)-off < nlmsgHdrLen {
			return replies, fmt.Errorf("sockdiag: lookup: %w", errShortHeader)
		}
		mlen := int(ne.Uint32(b[off:]))
		typ := ne.Uint16(b[off+4:])
		mseq := ne.Uint32(b[off+8:])
		if mlen < nlmsgHdrLen || mlen > len(b)-off {
			return replies, fmt.Errorf("sockdiag: lookup: %w: nlmsg_len %d", errShortMsg, mlen)
		}
		body := b[off+nlmsgHdrLen : off+mlen]
		off += (mlen + 3) &^ 3
		// The request's place in the batch, modulo 2^32: the seqs of a
		// batch may wrap past zero.
		if mseq-first >= uint32(n) {
			continue // a stale reply
		}
		idx := int(mseq - first)
		switch typ {
		case sockDiagByFam:
			replies++
			sk, err := decode(body)
			if err != nil {
				return replies, fmt.Errorf("sockdiag: lookup: %w", err)
			}
			if err := fn(idx, sk); err != nil {
				return replies, err
			}
		case nlmsgError:
			replies++
			if len(body) < 4 {
				return replies, fmt.Errorf("sockdiag: lookup: %w: netlink error", errShortMsg)
			}
			e := syscall.Errno(-int32(ne.Uint32(body)))
			if e != 0 && !errors.Is(e, unix.ENOENT) {
				return replies, &keyError{idx: idx, errno: e}
			}
		}
	}
	return replies, nil
}

// decodeShared decodes a reply into the Conn's reused socket.
func (c *Conn) decodeShared(body []byte) (*snapshot.Socket, error) {
	c.d = decoded{}
	if err := decodeInto(body, &c.d); err != nil {
		return nil, err
	}
	return c.f.set(&c.d), nil
}

func (c *Conn) ensureSlots() {
	if c.msgs != nil {
		return
	}
	c.slots = make([]byte, lookupBatch*slotLen)
	c.iovs = make([]unix.Iovec, lookupBatch)
	c.msgs = make([]unix.Mmsghdr, lookupBatch)
	for i := range c.msgs {
		c.iovs[i].Base = &c.slots[i*slotLen]
		c.iovs[i].SetLen(slotLen)
		c.msgs[i].Hdr.Iov = &c.iovs[i]
		c.msgs[i].Hdr.SetIovlen(1)
	}
}

// recvmmsg receives up to n datagrams, waiting for the first only.
func (c *Conn) recvmmsg(n int) (int, error) {
	n = min(n, len(c.msgs))
	for i := range n {
		c.msgs[i].Len = 0
		c.msgs[i].Hdr.Flags = 0
	}
	for {
		r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.msgs[0])), uintptr(n),
			unix.MSG_WAITFORONE, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	}
}

// appendExact appends an inet_diag_req_v2 for one socket (no NLM_F_DUMP)
// asking for the extras in ext.
func appendExact(dst []byte, k Key, seq uint32, ext uint8) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, nlmsgHdrLen+diagReqLen)...)
	b := dst[n:]
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFam)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0] = k.Family
	r[1] = unix.IPPROTO_TCP
	r[2] = ext
	ne.PutUint32(r[4:], ^uint32(0))
	id := r[8:]
	id[0], id[1] = byte(k.Local.Port()>>8), byte(k.Local.Port())
	id[2], id[3] = byte(k.Remote.Port()>>8), byte(k.Remote.Port())
	putAddr(id[4:20], k.Local.Addr(), k.Family)
	putAddr(id[20:36], k.Remote.Addr(), k.Family)
	ne.PutUint32(id[36:], k.IfIndex)
	ne.PutUint32(id[40:], uint32(k.Cookie))
	ne.PutUint32(id[44:], uint32(k.Cookie>>32))
	return dst
}

func putAddr(dst []byte, a netip.Addr, fam uint8) {
	if fam == unix.AF_INET {
		a4 := a.Unmap().As4()
		copy(dst, a4[:])
		return
	}
	a16 := a.As16()
	copy(dst, a16[:])
}

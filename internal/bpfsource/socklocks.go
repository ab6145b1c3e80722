// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Lock bits of sk_userlocks (SO_BUF_LOCK reads the same two bits).
const (
	LockSnd uint8 = 1 // SO_SNDBUF set by the application
	LockRcv uint8 = 2 // SO_RCVBUF set by the application
)

// SockLocks is the loaded iter/tcp program (bpf/socklocks.c) that reads
// the buffer lock bits and sizes of every TCP socket without touching
// any: the read-only replacement for duplicating owners' fds. Load it
// once per process; each Read walks the namespace of the calling thread.
// Read may be called from several goroutines at once.
type SockLocks struct {
	objs socklocksObjects
	link *link.Iter
}

// SockLock is one full TCP socket as the iterator saw it.
// Of the record's sk_sndbuf and sk_rcvbuf only their sign is checked:
// the join needs none of them, and 16 bytes a socket rather than 24 is
// 8 MB less at a million sockets, beside the last dump at a window's
// peak.
type SockLock struct {
	Cookie uint64
	State  uint8
	// Locks is sk_userlocks & 3: LockSnd, LockRcv.
	Locks uint8
}

// Locks is one walk of one namespace.
type Locks struct {
	// Netns is the namespace inode the records came from; 0 when the
	// namespace had no full TCP socket.
	Netns uint64
	// Recs are the sockets in the kernel's walk order: listeners, then
	// the established hash bucket by bucket, the order of a sock_diag
	// dump of the same namespace.
	Recs []SockLock
}

// Joiner returns a lookup by cookie that is cheapest when asked in walk
// order, as when joining a sock_diag dump: it tries the record after the
// last one found and a few beyond it, and only when those miss does it
// index every record (once) by cookie. A dump in two halves (sockdiag's
// split by port) delivers two interleaved sequences, each in walk order:
// the caller names each socket's lane (0 or 1), and each lane has its
// own place in the records, so neither lane's sockets send the other's
// to the index (a map of every cookie: at a million sockets tens of MB
// and more time than the join). The lookup is not safe for concurrent
// use.
func (l *Locks) Joiner() func(lane int, cookie uint64) (SockLock, bool) {
	j := &joiner{recs: l.Recs}
	return j.find
}

// joiner is a Joiner's state: each lane's place after its last match.
type joiner struct {
	recs  []SockLock
	next  [2]int
	index map[uint64]int
}

func (j *joiner) find(lane int, cookie uint64) (SockLock, bool) {
	lane &= 1
	next := j.next[lane]
	// Until a cookie is missing, a lane's next record is looked for
	// further: a lane may start far into the walk, past the other's
	// first sockets.
	ahead := joinAhead
	if j.index == nil {
		ahead = joinFar
	}
	for k := next; k < min(next+ahead, len(j.recs)); k++ {
		if j.recs[k].Cookie == cookie {
			j.next[lane] = k + 1
			return j.recs[k], true
		}
	}
	if j.index == nil {
		j.index = make(map[uint64]int, len(j.recs))
		for k, r := range j.recs {
			j.index[r.Cookie] = k
		}
	}
	if k, ok := j.index[cookie]; ok {
		j.next[lane] = k + 1
		return j.recs[k], true
	}
	return SockLock{}, false
}

// joinAhead is how many records past a lane's last match a Joiner tries
// before its index: the other lane's records lie between a lane's (half
// of them when the ports split evenly, so 64 in a row of the other lane
// are about 2^-64 likely), and sockets opened or closed between the dump
// and the walk shift the order by a few.
const joinAhead = 64

// joinFar is how far a Joiner looks for a lane's next record before its
// index exists: the first cookie not found there builds the index.
const joinFar = 4096

// OpenSockLocks checks the kernel can run the iterator and loads it.
// Errors that mean "cannot run here" wrap ErrNotSupported and say why.
// k is the kernel BTF shared with the command's other loads (nil: parse
// it here).
func OpenSockLocks(k *Kernel) (*SockLocks, error) {
	k = k.orNew() // one parse for the check and the load
	return openSockLocks(k, &ebpf.CollectionOptions{Cache: k.types()})
}

// openSockLocks loads with opts (tests relocate against a kernel layout
// of their own).
func openSockLocks(k *Kernel, opts *ebpf.CollectionOptions) (*SockLocks, error) {
	if err := iterSupported(k, "tcp", "5.9"); err != nil {
		return nil, err
	}
	var objs socklocksObjects
	if err := loadSocklocksObjects(&objs, opts); err != nil {
		return nil, loadError(fmt.Errorf("load iter/tcp: %w", err))
	}
	l, err := link.AttachIter(link.IterOptions{Program: objs.Socklocks})
	if err != nil {
		_ = objs.Close()
		return nil, loadError(fmt.Errorf("attach iter/tcp: %w", err))
	}
	return &SockLocks{objs: objs, link: l}, nil
}

// iterSupported says why the BPF iterator on target (its context type is
// bpf_iter__TARGET, first in Linux since) cannot run here, or nil.
func iterSupported(k *Kernel, target, since string) error {
	if !privileged() {
		return notSupported(needRoot)
	}
	spec, err := k.spec()
	if err != nil {
		return err
	}
	var st *btf.Struct
	if err := spec.TypeByName("bpf_iter__"+target, &st); err != nil {
		return notSupported("kernel has no iter/%s BPF iterator (needs Linux >= %s): %v", target, since, err)
	}
	return nil
}

// Close detaches the iterator and unloads the program.
func (l *SockLocks) Close() error {
	if l == nil {
		return nil
	}
	return errors.Join(l.link.Close(), l.objs.Close())
}

// Read walks the TCP sockets of the calling thread's network namespace:
// call it inside netns.Do to read another namespace (the kernel binds an
// iterator to the namespace of the task that opens it). Like a sock_diag
// dump, the kernel walks the host-wide TCP hash tables and skips other
// namespaces' sockets: a walk costs in proportion to every TCP socket on
// the host.
func (l *SockLocks) Read(hint int) (*Locks, error) {
	rc, err := l.link.Open()
	if err != nil {
		return nil, fmt.Errorf("bpfsource: socklocks: open iterator: %w", err)
	}
	defer rc.Close()
	return decodeSockLocks(bufio.NewReaderSize(rc, 64<<10), hint)
}

// sockLockSize is sizeof(struct sock_lock) (bpf/socklocks.c).
const sockLockSize = 24

// maxLockHint bounds the room decodeSockLocks makes ahead (160 MB).
const maxLockHint = 10_000_000

// decodeSockLocks reads records of struct sock_lock until EOF, with room
// made for hint of them (grown by doubling, a million were allocated
// about twice over). A truncated record or one no kernel writes is an
// error.
func decodeSockLocks(r io.Reader, hint int) (*Locks, error) {
	out := &Locks{Recs: make([]SockLock, 0, min(max(hint, 0), maxLockHint))}
	var b [sockLockSize]byte
	ne := binary.NativeEndian
	for n := 0; ; n++ {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if err == io.EOF {
				return out, nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("bpfsource: socklocks: record %d truncated", n)
			}
			return nil, fmt.Errorf("bpfsource: socklocks: read: %w", err)
		}
		sl := SockLock{
			Cookie: ne.Uint64(b[0:]),
			State:  b[20],
			Locks:  b[21],
		}
		ns := uint64(ne.Uint32(b[8:]))
		snd, rcv := int32(ne.Uint32(b[12:])), int32(ne.Uint32(b[16:]))
		switch {
		case sl.Cookie == 0 || ns == 0:
			return nil, fmt.Errorf("bpfsource: socklocks: record %d: zero cookie or namespace", n)
		case sl.State == 0 || sl.State > 13 || sl.State == 6 || sl.State == 12:
			return nil, fmt.Errorf("bpfsource: socklocks: record %d: state %d is no full socket's", n, sl.State)
		case sl.Locks&^(LockSnd|LockRcv) != 0 || b[22] != 0 || b[23] != 0:
			return nil, fmt.Errorf("bpfsource: socklocks: record %d: lock bits %#x or padding set", n, sl.Locks)
		case snd < 0 || rcv < 0:
			return nil, fmt.Errorf("bpfsource: socklocks: record %d: negative buffer size %d/%d", n, snd, rcv)
		case out.Netns != 0 && ns != out.Netns:
			return nil, fmt.Errorf("bpfsource: socklocks: record %d from namespace %d, the others from %d", n, ns, out.Netns)
		}
		out.Netns = ns
		out.Recs = append(out.Recs, sl)
	}
}

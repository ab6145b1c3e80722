package snapshot

import (
	"math/bits"
	"unsafe"
)

// infoWords is a TCPInfo's size in 4-byte words: a packed tcp_info says
// which of these differ from its chunk's first one, and holds those alone.
const infoWords = 64

// The packing reads a TCPInfo as infoWords words: this fails to compile
// if the struct's size changes.
var _ = [1]struct{}{}[unsafe.Sizeof(TCPInfo{})-4*infoWords]

// packChunkWords is how many words a chunk of packed tcp_info holds; an
// offset into it fits a uint16.
const packChunkWords = 1 << 14

// packChunk holds packed tcp_info records. Each is a 64-bit mask of the
// words of a TCPInfo that differ from proto (the first tcp_info packed
// into the chunk), then those words in order. Connections of one host
// share most of their tcp_info (MSS, window scales, options, ssthresh,
// zero counters): TestPackSize's idle one packs into 44 bytes, not 256.
type packChunk struct {
	proto TCPInfo
	used  int
	words [packChunkWords]uint32
}

func infoAsWords(t *TCPInfo) *[infoWords]uint32 {
	return (*[infoWords]uint32)(unsafe.Pointer(t))
}

// pack stores t in st's current chunk (a new one when it is full) and
// returns where.
func (st *Store) pack(t *TCPInfo) (*packChunk, uint16) {
	c := st.chunk
	if c == nil || c.used+2+infoWords > packChunkWords {
		c = &packChunk{proto: *t}
		st.chunk = c
	}
	w, p := infoAsWords(t), infoAsWords(&c.proto)
	off := c.used
	k := off + 2
	var mask uint64
	for i := range w {
		if w[i] != p[i] {
			mask |= 1 << i
			c.words[k] = w[i]
			k++
		}
	}
	c.words[off], c.words[off+1] = uint32(mask), uint32(mask>>32)
	c.used = k
	return c, uint16(off)
}

// unpack writes the tcp_info packed at off into t.
func (c *packChunk) unpack(off uint16, t *TCPInfo) {
	*t = c.proto
	w := infoAsWords(t)
	a := c.words[off:]
	mask := uint64(a[0]) | uint64(a[1])<<32
	a = a[2:]
	for j := 0; mask != 0; j++ {
		w[bits.TrailingZeros64(mask)] = a[j]
		mask &= mask - 1
	}
}

// TCP returns sk's tcp_info: Info, or, for a socket a Store kept, its
// packed copy unpacked into buf; nil when the socket has none. Read
// tcp_info through TCP, never Info, unless sk was built by hand: a kept
// socket's Info is nil. buf is written only for a packed one, so one
// buf serves one socket at a time.
func (sk *Socket) TCP(buf *TCPInfo) *TCPInfo { return infoOf(sk.Info, sk.pk, sk.pkOff, buf) }

// HasTCP says whether sk has a tcp_info (TCP is not nil).
func (sk *Socket) HasTCP() bool { return sk.Info != nil || sk.pk != nil }

// SharesTCP says whether sk holds the very tcp_info w kept, which a
// Store shares with an earlier sample when the connection moved nothing
// (KeepSame): its last_data_* and last_ack_* are then as old as the
// time between the samples less.
func (sk *Socket) SharesTCP(w *Was) bool {
	if sk.pk != nil {
		return sk.pk == w.pk && sk.pkOff == w.pkOff
	}
	return sk.Info != nil && sk.Info == w.Info
}

// TCP is Socket.TCP for the record of an earlier sample.
func (w *Was) TCP(buf *TCPInfo) *TCPInfo { return infoOf(w.Info, w.pk, w.pkOff, buf) }

// infoOf is info, else the tcp_info packed at off in pk unpacked into
// buf, else nil.
func infoOf(info *TCPInfo, pk *packChunk, off uint16, buf *TCPInfo) *TCPInfo {
	if info != nil {
		return info
	}
	if pk != nil {
		pk.unpack(off, buf)
		return buf
	}
	return nil
}

// HasTCP says whether w has a tcp_info.
func (w *Was) HasTCP() bool { return w.Info != nil || w.pk != nil }

// SPDX-License-Identifier: Apache-2.0

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

// TCPRef.chunk converts a pointer to proto into one to its chunk: this
// fails to compile if proto is not the first field.
var _ = [1]struct{}{}[unsafe.Offsetof(packChunk{}.proto)]

// packChunkWords is how many words a chunk of packed tcp_info holds; an
// offset into it fits a uint16.
const packChunkWords = 1 << 14

// packChunk holds packed tcp_info records. Each is a 64-bit mask of the
// words of a TCPInfo that differ from proto (the first tcp_info packed
// into the chunk), then those words in order. Connections of one host
// share most of their tcp_info (MSS, window scales, options, ssthresh,
// zero counters): TestPackSize's idle one packs into 44 bytes, not 256.
type packChunk struct {
	// proto comes first: a packed TCPRef points at it (TCPRef.chunk).
	proto TCPInfo
	used  int
	words [packChunkWords]uint32
}

func infoAsWords(t *TCPInfo) *[infoWords]uint32 {
	return (*[infoWords]uint32)(unsafe.Pointer(t))
}

// pack stores t in st's current chunk (a new one when it is full) and
// returns where.
func (st *Store) pack(t *TCPInfo) TCPRef {
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
	return TCPRef{t: &c.proto, at: uint16(off) + 1}
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

// TCPRef is where a Socket holds its tcp_info: a TCPInfo of its own
// (TCPOf), or a record a Store packed; the zero TCPRef holds none. Read
// it with Socket.TCP; encoding/json reads and writes it as the TCPInfo.
type TCPRef struct {
	// t is the tcp_info itself when at is 0; else the proto of the
	// packChunk whose record at word at-1 holds it (one pointer, so that
	// a Socket stays 120 bytes).
	t  *TCPInfo
	at uint16
}

// TCPOf returns a TCPRef holding t itself (not a copy); nil holds none.
func TCPOf(t *TCPInfo) TCPRef { return TCPRef{t: t} }

// get is the tcp_info r holds, unpacked into buf when packed; nil when
// none.
func (r *TCPRef) get(buf *TCPInfo) *TCPInfo {
	if r.at == 0 {
		return r.t
	}
	r.chunk().unpack(r.at-1, buf)
	return buf
}

// chunk is the packChunk of a packed r: r.t is its proto, its first
// field, so they share an address.
func (r *TCPRef) chunk() *packChunk { return (*packChunk)(unsafe.Pointer(r.t)) }

// own is the TCPInfo r holds unpacked; nil when none or packed.
func (r *TCPRef) own() *TCPInfo {
	if r.at != 0 {
		return nil
	}
	return r.t
}

// TCP returns sk's tcp_info: its own, or, for a socket a Store kept, its
// packed copy unpacked into buf; nil when the socket has none. buf is
// written only for a packed one, so one buf serves one socket at a time.
func (sk *Socket) TCP(buf *TCPInfo) *TCPInfo { return sk.Info.get(buf) }

// HasTCP says whether sk has a tcp_info (TCP is not nil).
func (sk *Socket) HasTCP() bool { return sk.Info.t != nil }

// SharesTCP says whether sk holds the very tcp_info w kept, which a
// Store shares with an earlier sample when the connection moved nothing
// (KeepSame): its last_data_* and last_ack_* are then as old as the
// time between the samples less.
func (sk *Socket) SharesTCP(w *Was) bool { return sk.Info.t != nil && sk.Info == w.tcp() }

// TCP is Socket.TCP for the record of an earlier sample.
func (w *Was) TCP(buf *TCPInfo) *TCPInfo { r := w.tcp(); return r.get(buf) }

// HasTCP says whether w has a tcp_info.
func (w *Was) HasTCP() bool { return w.tcpT != nil }

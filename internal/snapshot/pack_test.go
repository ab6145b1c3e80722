// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// randInfo is a tcp_info whose every word is random or zero, as a
// kernel's may be: some words of it are left at proto's values.
func randInfo(rng *rand.Rand, proto *TCPInfo) TCPInfo {
	t := *proto
	w := infoAsWords(&t)
	for i := range w {
		switch rng.IntN(3) {
		case 0:
			w[i] = rng.Uint32()
		case 1:
			w[i] = 0
		}
	}
	return t
}

// TestPackRoundTrip: every tcp_info a Store packs reads back equal, across
// chunks, whatever words it shares with the chunk's first one; and a
// chunk's records never overlap (each is read back after all are packed).
func TestPackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var st Store
	proto := TCPInfo{Len: SizeKnown, SndMSS: 1448, RcvMSS: 536, PMTU: 65535, SndSsthresh: 0x7fffffff, MaxPacingRate: ^uint64(0)}
	const n = 5000
	want := make([]TCPInfo, n)
	kept := make([]Socket, n)
	for i := range want {
		want[i] = randInfo(rng, &proto)
		if i%7 == 0 {
			want[i] = proto // all words the chunk's: a mask alone
		}
		kept[i] = st.Keep(&Socket{Cookie: uint64(i), Info: TCPOf(&want[i])})
	}
	chunks := map[*packChunk]bool{}
	var tb TCPInfo
	for i := range kept {
		chunks[kept[i].Info.chunk()] = true
		if got := kept[i].TCP(&tb); got != &tb || tb != want[i] {
			t.Fatalf("socket %d: read back %+v, want %+v", i, tb, want[i])
		}
		w := kept[i].Was()
		if got := w.TCP(&tb); got == nil || tb != want[i] {
			t.Fatalf("socket %d's Was: read back %+v", i, tb)
		}
	}
	if len(chunks) < 2 {
		t.Errorf("%d sockets in %d chunk: the test does not cross chunks", n, len(chunks))
	}
}

// TestPackSize: an idle connection like its chunk's first packs into a
// small part of a TCPInfo (docs/performance-history.md adds these bytes
// up).
func TestPackSize(t *testing.T) {
	var st Store
	a := TCPInfo{Len: SizeKnown, RTO: 201000, ATO: 40000, SndMSS: 32768, RcvMSS: 536, PMTU: 65535, RTT: 30, RTTVar: 15,
		SndSsthresh: 0x7fffffff, SndCwnd: 10, AdvMSS: 65483, Reordering: 3, RcvSpace: 65483, MaxPacingRate: ^uint64(0),
		PacingRate: 21845333333, BytesAcked: 1, SegsOut: 1, SegsIn: 2, MinRTT: 30, SndWnd: 65483, RcvWnd: 65483,
		LastDataSent: 5000, LastAckSent: 5000, LastDataRecv: 5000, LastAckRecv: 5000}
	b := a
	b.RTT, b.RTTVar, b.MinRTT, b.PacingRate = 41, 20, 41, 15984390243
	b.LastDataSent, b.LastAckSent, b.LastDataRecv, b.LastAckRecv = 4990, 4990, 4990, 4990
	st.Keep(&Socket{Info: TCPOf(&a)})
	before := st.chunk.used
	st.Keep(&Socket{Info: TCPOf(&b)})
	got := 4 * (st.chunk.used - before)
	t.Logf("an idle connection's tcp_info packs into %d bytes (mask and 9 words), not %d", got, unsafe.Sizeof(TCPInfo{}))
	if got != 4*(2+9) {
		t.Errorf("packed into %d bytes, want %d", got, 4*(2+9))
	}
}

// FuzzPack: any tcp_info bytes pack and read back unchanged.
func FuzzPack(f *testing.F) {
	f.Add(make([]byte, 256), make([]byte, 256))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var x, y TCPInfo
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&x)), unsafe.Sizeof(x)), a)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&y)), unsafe.Sizeof(y)), b)
		var st Store
		kx, ky := st.Keep(&Socket{Info: TCPOf(&x)}), st.Keep(&Socket{Info: TCPOf(&y)})
		var tb TCPInfo
		if kx.TCP(&tb); tb != x {
			t.Fatalf("first: %+v, want %+v", tb, x)
		}
		if ky.TCP(&tb); tb != y {
			t.Fatalf("second: %+v, want %+v", tb, y)
		}
	})
}

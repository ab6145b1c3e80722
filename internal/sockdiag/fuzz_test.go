// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// fixtureMessages returns every netlink message of the captured dumps
// (header included) and their seq.
func fixtureMessages(t testing.TB) (msgs [][]byte, dgrams [][]byte, seq uint32) {
	t.Helper()
	for _, c := range captures {
		s, ds := readHex(t, filepath.Join("testdata", "dump_"+c.name+".hex"))
		seq = s
		for _, d := range ds {
			dgrams = append(dgrams, d)
			for off := 0; off+nlmsgHdrLen <= len(d); {
				n := int(ne.Uint32(d[off:]))
				if n < nlmsgHdrLen || off+n > len(d) {
					t.Fatalf("%s: bad fixture message at %d", c.name, off)
				}
				msgs = append(msgs, d[off:off+n])
				off += (n + 3) &^ 3
			}
		}
	}
	return msgs, dgrams, seq
}

// attrValues returns the payloads of attribute typ in a message body.
func attrValues(body []byte, typ uint16) [][]byte {
	var out [][]byte
	for off := diagMsgLen; off+rtaHdrLen <= len(body); {
		n := int(ne.Uint16(body[off:]))
		if n < rtaHdrLen || off+n > len(body) {
			break
		}
		if ne.Uint16(body[off+2:])&nlaTypeMask == typ {
			out = append(out, body[off+rtaHdrLen:off+n])
		}
		off += (n + 3) &^ 3
	}
	return out
}

func FuzzDecodeMessage(f *testing.F) {
	msgs, _, _ := fixtureMessages(f)
	for _, m := range msgs {
		if ne.Uint16(m[4:]) == sockDiagByFam {
			f.Add(m[nlmsgHdrLen:])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var sk snapshot.Socket
		if err := decodeMessage(b, &sk); err != nil {
			return
		}
		if !sk.Local.IsValid() || !sk.Remote.IsValid() {
			t.Fatalf("decoded without addresses: %+v", sk)
		}
		if sk.Local.Addr().Is4() != (sk.Family == 2) {
			t.Fatalf("family %d with address %v", sk.Family, sk.Local)
		}
		if sk.TCP(nil) != nil {
			var found bool
			for _, v := range attrValues(b, attrInfo) {
				found = found || v != nil && int(sk.TCP(nil).Len) == len(v)
			}
			if !found {
				t.Fatalf("tcp_info Len %d matches no INFO attribute", sk.TCP(nil).Len)
			}
		}
	})
}

func FuzzDecodeTCPInfo(f *testing.F) {
	msgs, _, _ := fixtureMessages(f)
	for _, m := range msgs {
		if ne.Uint16(m[4:]) == sockDiagByFam {
			for _, v := range attrValues(m[nlmsgHdrLen:], attrInfo) {
				f.Add(v)
				f.Add(v[:104]) // as a 3.x kernel would send
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := DecodeTCPInfo(b)
		// A netlink attribute holds at most 65,535 bytes.
		if int(got.Len) != min(len(b), 0xffff) {
			t.Fatalf("Len %d for %d bytes", got.Len, len(b))
		}
		// Bytes past the known struct change nothing.
		if len(b) > snapshot.SizeKnown {
			short := DecodeTCPInfo(b[:snapshot.SizeKnown])
			short.Len = got.Len
			if short != got {
				t.Fatalf("bytes past %d changed the result", snapshot.SizeKnown)
			}
		}
		// Missing bytes read as zero.
		if len(b) < snapshot.SizeKnown {
			padded := DecodeTCPInfo(append(bytes.Clone(b), make([]byte, snapshot.SizeKnown-len(b))...))
			padded.Len = got.Len
			if padded != got {
				t.Fatalf("short tcp_info differs from zero-padded one")
			}
		}
	})
}

func FuzzParseDump(f *testing.F) {
	_, dgrams, seq := fixtureMessages(f)
	for _, d := range dgrams {
		f.Add(d, seq)
	}
	f.Fuzz(func(t *testing.T, b []byte, seq uint32) {
		n := 0
		done, err := parseDump(b, seq, 0, func(sk *snapshot.Socket) error {
			if sk == nil {
				t.Fatal("nil socket")
			}
			n++
			return nil
		})
		if n > len(b)/(nlmsgHdrLen+diagMsgLen) {
			t.Fatalf("%d sockets from %d bytes", n, len(b))
		}
		// readAhead stops receiving after a datagram endsDump calls final:
		// the parser must then stop too, and must not finish on one it
		// does not call final (the reader would wait for more).
		if ends := endsDump(b, seq); ends && !done && err == nil || done && !ends {
			t.Fatalf("endsDump %v, parse done %v err %v", ends, done, err)
		}
	})
}

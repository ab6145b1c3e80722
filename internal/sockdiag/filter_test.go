// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// runBytecode evaluates a program the way the kernel's inet_diag_bc_run
// does, for tests: true when it ends exactly at the end.
func runBytecode(bc []byte, fam uint8, local, remote netip.AddrPort) bool {
	for len(bc) > 0 {
		if len(bc) < opLen {
			return false
		}
		code, yes, no := bc[0], int(bc[1]), int(ne.Uint16(bc[2:]))
		ok := true
		switch code {
		case bcJmp:
			ok = false
		case bcSEq, bcDEq, bcSGE, bcSLE, bcDGE, bcDLE:
			if len(bc) < 2*opLen {
				return false
			}
			port := ne.Uint16(bc[opLen+2:])
			switch code {
			case bcSEq:
				ok = local.Port() == port
			case bcDEq:
				ok = remote.Port() == port
			case bcSGE:
				ok = local.Port() >= port
			case bcSLE:
				ok = local.Port() <= port
			case bcDGE:
				ok = remote.Port() >= port
			case bcDLE:
				ok = remote.Port() <= port
			}
		case bcSCond, bcDCond:
			if len(bc) < opLen+8 {
				return false
			}
			hc := bc[opLen:]
			cfam, bits := hc[0], int(hc[1])
			port := int32(ne.Uint32(hc[4:]))
			ap := remote
			if code == bcSCond {
				ap = local
			}
			if port != -1 && int(ap.Port()) != int(port) {
				ok = false
				break
			}
			alen := map[uint8]int{unix.AF_INET: 4, unix.AF_INET6: 16}[cfam]
			if len(hc) < 8+alen {
				return false
			}
			addr := ap.Addr()
			if cfam == unix.AF_INET && fam == unix.AF_INET6 && addr.Is4In6() {
				addr = addr.Unmap()
			} else if cfam != fam {
				ok = false
				break
			}
			if bits == 0 {
				break
			}
			want, _ := netip.AddrFromSlice(hc[8 : 8+alen])
			pfx, err := want.Prefix(bits)
			ok = err == nil && pfx.Contains(addr)
		}
		step := no
		if ok {
			step = yes
		}
		if step == 0 {
			return false // the kernel's audit refuses this; avoid a loop
		}
		if step > len(bc) {
			return false
		}
		bc = bc[step:]
	}
	return true
}

// auditBytecode checks a program the way the kernel's inet_diag_bc_audit
// does (op lengths, jump targets on the "yes" chain, operand sizes).
func auditBytecode(bc []byte) error {
	total := len(bc)
	onChain := map[int]bool{}
	for off := 0; off < total; {
		onChain[total-off] = true
		if total-off < opLen {
			return errors.New("short op")
		}
		code, yes, no := bc[off], int(bc[off+1]), int(ne.Uint16(bc[off+2:]))
		minLen := opLen
		switch code {
		case bcSEq, bcDEq, bcSGE, bcSLE, bcDGE, bcDLE:
			minLen += opLen
		case bcSCond, bcDCond:
			minLen += 8
			if total-off < minLen {
				return errors.New("short hostcond")
			}
			alen, ok := map[uint8]int{unix.AF_UNSPEC: 0, unix.AF_INET: 4, unix.AF_INET6: 16}[bc[off+opLen]]
			if !ok {
				return errors.New("bad family")
			}
			minLen += alen
			if int(bc[off+opLen+1]) > 8*alen {
				return errors.New("bad prefix length")
			}
		case bcJmp:
		default:
			return fmt.Errorf("op %d not produced by Filter", code)
		}
		if total-off < minLen {
			return errors.New("short operand")
		}
		left := total - off
		if no < minLen || no > left+4 || no&3 != 0 {
			return fmt.Errorf("bad no %d at %d", no, off)
		}
		if yes < minLen || yes > left+4 || yes&3 != 0 {
			return fmt.Errorf("bad yes %d at %d", yes, off)
		}
		off += yes
	}
	// Jumps that stay inside must land on an op of the yes chain.
	for off := 0; off < total; off += int(bc[off+1]) {
		no := int(ne.Uint16(bc[off+2:]))
		if left := total - off; no < left && !onChain[left-no] {
			return fmt.Errorf("jump from %d lands inside an op", off)
		}
	}
	return nil
}

// matchGo is what a Filter means, written plainly.
func matchGo(f *Filter, local, remote netip.AddrPort) bool {
	inPfx := func(ps []netip.Prefix, a netip.Addr) bool {
		if len(ps) == 0 {
			return true
		}
		for _, p := range ps {
			if p.Contains(a) || p.Addr().Is4() && a.Is4In6() && p.Contains(a.Unmap()) {
				return true
			}
		}
		return false
	}
	anyPort := func(ps []uint16, ports ...uint16) bool {
		if len(ps) == 0 {
			return true
		}
		for _, p := range ports {
			if slices.Contains(ps, p) {
				return true
			}
		}
		return false
	}
	return anyPort(f.Ports, local.Port(), remote.Port()) && anyPort(f.LPorts, local.Port()) &&
		anyPort(f.RPorts, remote.Port()) && inPfx(f.Peers, remote.Addr()) && inPfx(f.Locals, local.Addr())
}

func TestBytecodeCases(t *testing.T) {
	ap := netip.MustParseAddrPort
	f := &Filter{Ports: []uint16{80, 443}, Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")}}
	bc, err := f.Bytecode()
	if err != nil {
		t.Fatal(err)
	}
	if err := auditBytecode(bc); err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, c := range []struct {
		fam           uint8
		local, remote string
		want          bool
	}{
		{unix.AF_INET, "198.18.0.1:80", "198.18.1.2:5555", true},
		{unix.AF_INET, "198.18.0.1:5555", "198.19.1.2:443", true},
		{unix.AF_INET, "198.18.0.1:5555", "198.20.1.2:443", false},
		{unix.AF_INET, "198.18.0.1:5555", "198.18.1.2:444", false},
		{unix.AF_INET6, "[::ffff:198.18.0.1]:80", "[::ffff:198.18.0.9]:1000", true},
		{unix.AF_INET6, "[2001:db8::1]:80", "[2001:db8::2]:1000", true},
		{unix.AF_INET6, "[2001:db9::1]:80", "[2001:db9::2]:1000", false},
	} {
		if got := runBytecode(bc, c.fam, ap(c.local), ap(c.remote)); got != c.want {
			t.Errorf("%s -> %s: matched %v, want %v", c.local, c.remote, got, c.want)
		}
	}
	if bc, _ := (&Filter{}).Bytecode(); bc != nil {
		t.Errorf("empty filter compiled to %d bytes", len(bc))
	}
	many := &Filter{}
	for p := range 5000 {
		many.Ports = append(many.Ports, uint16(p))
	}
	if _, err := many.Bytecode(); !errors.Is(err, errFilterTooLong) {
		t.Errorf("5000 ports: %v, want errFilterTooLong", err)
	}
}

// FuzzBytecode: any filter compiles to a program the kernel's audit
// accepts and that matches exactly what the filter means.
func FuzzBytecode(f *testing.F) {
	f.Add([]byte{1, 0, 80, 2, 0x1f, 0x90}, []byte{198, 18, 0, 0, 15}, uint16(80), uint16(5555), []byte{198, 18, 0, 1})
	f.Add([]byte{}, []byte{}, uint16(1), uint16(2), []byte{127, 0, 0, 1})
	f.Add([]byte{3, 1, 0}, []byte{0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32}, uint16(256), uint16(9), []byte{0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, ports, pfx []byte, lport, rport uint16, addr []byte) {
		var flt Filter
		for i := 0; i+2 < len(ports) && i < 60; i += 3 {
			p := uint16(ports[i+1])<<8 | uint16(ports[i+2])
			switch ports[i] % 3 {
			case 0:
				flt.Ports = append(flt.Ports, p)
			case 1:
				flt.LPorts = append(flt.LPorts, p)
			default:
				flt.RPorts = append(flt.RPorts, p)
			}
		}
		for len(pfx) >= 5 && len(flt.Peers)+len(flt.Locals) < 8 {
			n := 4
			if pfx[0]&1 == 1 && len(pfx) >= 17 {
				n = 16
			}
			a, _ := netip.AddrFromSlice(pfx[:n])
			bits := int(pfx[n]) % (8*n + 1)
			p := netip.PrefixFrom(a, bits)
			if pfx[n]&0x80 != 0 {
				flt.Locals = append(flt.Locals, p)
			} else {
				flt.Peers = append(flt.Peers, p)
			}
			pfx = pfx[n+1:]
		}
		bc, err := flt.Bytecode()
		if err != nil {
			t.Fatalf("compile %+v: %v", flt, err)
		}
		if flt.Empty() {
			if bc != nil {
				t.Fatal("empty filter gave bytecode")
			}
			return
		}
		if err := auditBytecode(bc); err != nil {
			t.Fatalf("audit %+v: %v", flt, err)
		}
		a, ok := netip.AddrFromSlice(addr)
		if !ok {
			return
		}
		fam := uint8(unix.AF_INET)
		if a.Is6() {
			fam = unix.AF_INET6
		}
		local, remote := netip.AddrPortFrom(a, lport), netip.AddrPortFrom(a, rport)
		if got, want := runBytecode(bc, fam, local, remote), matchGo(&flt, local, remote); got != want {
			t.Fatalf("%+v on %v -> %v: bytecode %v, meaning %v", flt, local, remote, got, want)
		}
	})
}

// TestFilterLive: the kernel accepts the program and returns exactly the
// matching sockets, by dump and by exact lookup.
func TestFilterLive(t *testing.T) {
	ns := newNetns(t)
	fds := newFDs(t)
	var portA, portB uint16
	ns.do(func() {
		la, pa := fds.listen(mustAddrPort("127.0.0.1", 0), 16)
		lb, pb := fds.listen(mustAddrPort("::1", 0), 16)
		portA, portB = pa, pb
		for range 3 {
			fds.connect(mustAddrPort("127.0.0.1", pa), 0)
			fds.accept(la)
			fds.connect(mustAddrPort("::1", pb), 0)
			fds.accept(lb)
		}
	})
	states := uint32(1 << snapshot.Established)
	for _, c := range []struct {
		f    Filter
		want int
	}{
		{Filter{}, 12},
		{Filter{Ports: []uint16{portA}}, 6},
		{Filter{LPorts: []uint16{portA}}, 3},
		{Filter{RPorts: []uint16{portA, portB}}, 6},
		{Filter{Peers: []netip.Prefix{netip.MustParsePrefix("::1/128")}}, 6},
		{Filter{Ports: []uint16{portB}, Peers: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, 0},
		{Filter{Locals: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, RPorts: []uint16{portA}}, 3},
	} {
		t.Run(fmt.Sprintf("%+v", c.f), func(t *testing.T) {
			var got []*snapshot.Socket
			ns.do(func() {
				conn, err := Open()
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				err = conn.Dump(Options{States: states, Info: true, Filter: &c.f}, func(sk *snapshot.Socket) error {
					got = append(got, sk)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, sk := range got {
					if !matchGo(&c.f, sk.Local.AddrPort(), sk.Remote.AddrPort()) {
						t.Errorf("kernel sent %v -> %v, not matching", sk.Local, sk.Remote)
					}
				}
				keys := make([]Key, len(got))
				for i, sk := range got {
					keys[i] = KeyOf(sk)
				}
				keys = append(keys, Key{Family: unix.AF_INET, Local: snapshot.EndpointOf(mustAddrPort("127.0.0.1", 1)), Remote: snapshot.EndpointOf(mustAddrPort("127.0.0.1", 2))})
				seen := 0
				err = conn.Lookup(Options{Info: true, Mem: true}, keys, func(i int, sk *snapshot.Socket) error {
					seen++
					if sk.Cookie != keys[i].Cookie || sk.TCP(nil) == nil || sk.Mem == nil {
						t.Errorf("lookup %d: cookie %x want %x, info %v mem %v", i, sk.Cookie, keys[i].Cookie, sk.TCP(nil) != nil, sk.Mem != nil)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if seen != len(got) {
					t.Errorf("lookup found %d of %d", seen, len(got))
				}
			})
			if len(got) != c.want {
				t.Errorf("dump gave %d sockets, want %d", len(got), c.want)
			}
		})
	}
}

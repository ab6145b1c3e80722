// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Filter selects sockets in the kernel: an INET_DIAG_REQ_BYTECODE program
// runs on each socket of a dump, and only matching ones are encoded and
// sent. Categories combine with AND, values within one with OR; an empty
// Filter matches everything. The kernel still walks every socket of the
// namespace to run the program: what a filtered dump saves is the copy and
// decode of the sockets it rejects.
type Filter struct {
	Ports  []uint16       // either end's port
	LPorts []uint16       // local port
	RPorts []uint16       // remote port
	Peers  []netip.Prefix // remote address
	Locals []netip.Prefix // local address
}

// Empty reports whether f matches every socket.
func (f *Filter) Empty() bool {
	return f == nil || len(f.Ports)+len(f.LPorts)+len(f.RPorts)+len(f.Peers)+len(f.Locals) == 0
}

// Bytecode ops and attribute type from include/uapi/linux/inet_diag.h.
const (
	bcJmp   = 1  // INET_DIAG_BC_JMP
	bcSCond = 7  // INET_DIAG_BC_S_COND
	bcDCond = 8  // INET_DIAG_BC_D_COND
	bcSEq   = 11 // INET_DIAG_BC_S_EQ
	bcDEq   = 12 // INET_DIAG_BC_D_EQ

	attrReqBytecode = 1 // INET_DIAG_REQ_BYTECODE

	opLen = 4 // struct inet_diag_bc_op
)

// maxBytecode keeps a program well below what one request may carry (the
// kernel takes up to the netlink message size; ss stays far below too).
const maxBytecode = 32 << 10

var errFilterTooLong = errors.New("filter too long")

// cond is one test: an op with its operand bytes.
type cond struct {
	code    uint8
	operand []byte
}

func (c cond) len() int { return opLen + len(c.operand) }

// Bytecode compiles f. Each category is an OR chain: a test that matches
// falls through to a JMP past the rest of its chain; one that fails goes
// to the next test, and the last one's failure jumps past the end of the
// program (rejection). Every jump lands on an op the kernel's audit
// reaches by the "yes" chain. nil for an empty Filter.
func (f *Filter) Bytecode() ([]byte, error) {
	if f.Empty() {
		return nil, nil
	}
	var groups [][]cond
	if len(f.Ports) > 0 {
		var g []cond
		for _, p := range f.Ports {
			g = append(g, portCond(bcSEq, p), portCond(bcDEq, p))
		}
		groups = append(groups, g)
	}
	for _, c := range []struct {
		code  uint8
		ports []uint16
	}{{bcSEq, f.LPorts}, {bcDEq, f.RPorts}} {
		if len(c.ports) == 0 {
			continue
		}
		var g []cond
		for _, p := range c.ports {
			g = append(g, portCond(c.code, p))
		}
		groups = append(groups, g)
	}
	for _, c := range []struct {
		code uint8
		pfx  []netip.Prefix
	}{{bcDCond, f.Peers}, {bcSCond, f.Locals}} {
		if len(c.pfx) == 0 {
			continue
		}
		var g []cond
		for _, p := range c.pfx {
			hc, err := hostCond(c.code, p)
			if err != nil {
				return nil, err
			}
			g = append(g, hc)
		}
		groups = append(groups, g)
	}
	total := 0
	for _, g := range groups {
		for i, c := range g {
			total += c.len()
			if i < len(g)-1 {
				total += opLen // the JMP after it
			}
		}
	}
	if total > maxBytecode {
		return nil, fmt.Errorf("sockdiag: %w: %d bytes of bytecode, at most %d", errFilterTooLong, total, maxBytecode)
	}
	b := make([]byte, 0, total)
	for _, g := range groups {
		glen := 0
		for i, c := range g {
			glen += c.len()
			if i < len(g)-1 {
				glen += opLen
			}
		}
		gstart := len(b)
		for i, c := range g {
			pos := len(b)
			yes := c.len()
			var no int
			if i < len(g)-1 {
				no = c.len() + opLen // skip the JMP: next test
			} else {
				no = total - pos + opLen // past the end: reject
			}
			b = appendOp(b, c.code, yes, no)
			b = append(b, c.operand...)
			if i < len(g)-1 {
				jpos := len(b)
				b = appendOp(b, bcJmp, opLen, gstart+glen-jpos) // matched: leave the chain
			}
		}
	}
	return b, nil
}

func appendOp(b []byte, code uint8, yes, no int) []byte {
	b = append(b, code, uint8(yes), 0, 0)
	ne.PutUint16(b[len(b)-2:], uint16(no))
	return b
}

// portCond compares a port: the op is followed by a second op whose "no"
// field holds the port.
func portCond(code uint8, port uint16) cond {
	operand := make([]byte, opLen)
	ne.PutUint16(operand[2:], port)
	return cond{code: code, operand: operand}
}

// hostCond matches an address prefix (struct inet_diag_hostcond, port -1
// for any). IPv4 prefixes also match IPv4-mapped addresses on IPv6
// sockets (the kernel does that).
func hostCond(code uint8, p netip.Prefix) (cond, error) {
	if !p.IsValid() {
		return cond{}, fmt.Errorf("sockdiag: invalid prefix %v", p)
	}
	p = p.Masked()
	a := p.Addr()
	if a.Is4In6() {
		a = a.Unmap()
		p = netip.PrefixFrom(a, max(p.Bits()-96, 0))
	}
	fam := uint8(unix.AF_INET6)
	if a.Is4() {
		fam = unix.AF_INET
	}
	raw := a.AsSlice()
	operand := make([]byte, 8, 8+len(raw))
	operand[0] = fam
	operand[1] = uint8(p.Bits())
	ne.PutUint32(operand[4:], 0xffffffff) // port -1: any
	operand = append(operand, raw...)
	return cond{code: code, operand: operand}, nil
}

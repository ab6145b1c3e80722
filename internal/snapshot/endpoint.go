// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"errors"
	"net/netip"
)

// Endpoint is a socket's address and port: netip.AddrPort without the
// zone, in 20 bytes instead of 32 and with no pointer for the garbage
// collector to follow. A million sockets hold two each. sock_diag sends
// no zone (the interface is Socket.IfIndex). The zero Endpoint is
// invalid, like the zero netip.AddrPort.
type Endpoint struct {
	ip   [16]byte
	port uint16
	// v is 4 or 6 for a valid endpoint, 0 for the zero one.
	v uint8
}

// EndpointOf returns ap without its zone.
func EndpointOf(ap netip.AddrPort) Endpoint {
	a := ap.Addr()
	switch {
	case a.Is4():
		return Endpoint{ip: a.As16(), port: ap.Port(), v: 4}
	case a.Is6():
		return Endpoint{ip: a.As16(), port: ap.Port(), v: 6}
	}
	return Endpoint{}
}

// EndpointFrom returns the endpoint of a and port, a's zone left out.
func EndpointFrom(a netip.Addr, port uint16) Endpoint {
	return EndpointOf(netip.AddrPortFrom(a, port))
}

// Endpoint4 and Endpoint6 build an endpoint from sock_diag's bytes.
func Endpoint4(ip [4]byte, port uint16) Endpoint {
	e := Endpoint{port: port, v: 4}
	e.ip[10], e.ip[11] = 0xff, 0xff
	copy(e.ip[12:], ip[:])
	return e
}

// Endpoint6 is Endpoint4 for an IPv6 address.
func Endpoint6(ip [16]byte, port uint16) Endpoint {
	return Endpoint{ip: ip, port: port, v: 6}
}

// Addr returns the address; the zero netip.Addr when e is invalid.
func (e Endpoint) Addr() netip.Addr {
	switch e.v {
	case 4:
		return netip.AddrFrom4([4]byte(e.ip[12:]))
	case 6:
		return netip.AddrFrom16(e.ip)
	}
	return netip.Addr{}
}

// As16 returns the address as 16 bytes, an IPv4 one IPv4-mapped (as
// netip.Addr.As16 does).
func (e Endpoint) As16() [16]byte { return e.ip }

// IsUnspecified reports whether the address is 0.0.0.0 or ::, as
// netip.Addr.IsUnspecified does.
func (e Endpoint) IsUnspecified() bool {
	switch e.v {
	case 4:
		return [4]byte(e.ip[12:]) == [4]byte{}
	case 6:
		return e.ip == [16]byte{}
	}
	return false
}

// SameAddr reports whether e and o have one address (an IPv4 one and its
// IPv4-mapped form are two, as in netip), whatever their ports.
func (e Endpoint) SameAddr(o Endpoint) bool { return e.v == o.v && e.ip == o.ip }

// Port returns the port.
func (e Endpoint) Port() uint16 { return e.port }

// WithPort is e with port p.
func (e Endpoint) WithPort(p uint16) Endpoint {
	e.port = p
	return e
}

// IsValid reports whether e has an address.
func (e Endpoint) IsValid() bool { return e.v != 0 }

// AddrPort returns e as a netip.AddrPort.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.Addr(), e.port) }

// String is netip.AddrPort's: "1.2.3.4:80", "[::1]:80", "invalid AddrPort".
func (e Endpoint) String() string { return e.AddrPort().String() }

// Compare orders as netip.AddrPort.Compare does.
func (e Endpoint) Compare(o Endpoint) int { return e.AddrPort().Compare(o.AddrPort()) }

// AppendTo appends String's text to b.
func (e Endpoint) AppendTo(b []byte) []byte { return e.AddrPort().AppendTo(b) }

// MarshalText is netip.AddrPort's: the zero Endpoint is "".
func (e Endpoint) MarshalText() ([]byte, error) { return e.AddrPort().MarshalText() }

// errZone: no source of sockets sends a zone, so a snapshot with one was
// not written by tcpdoctor.
var errZone = errors.New("snapshot: a socket address with a zone")

// UnmarshalText parses what MarshalText writes.
func (e *Endpoint) UnmarshalText(b []byte) error {
	var ap netip.AddrPort
	if err := ap.UnmarshalText(b); err != nil {
		return err
	}
	if ap.Addr().Zone() != "" {
		return errZone
	}
	*e = EndpointOf(ap)
	return nil
}

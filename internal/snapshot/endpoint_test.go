// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// TestEndpoint: an Endpoint says what the netip.AddrPort it holds says,
// an IPv4 address apart from its IPv4-mapped IPv6 form.
func TestEndpoint(t *testing.T) {
	for _, s := range []string{"127.0.0.1:80", "[::ffff:127.0.0.1]:80", "[::1]:443", "[2001:db8::1]:0", "0.0.0.0:0", "[::]:22"} {
		ap := netip.MustParseAddrPort(s)
		e := EndpointOf(ap)
		if e.AddrPort() != ap || e.Addr() != ap.Addr() || e.Port() != ap.Port() || !e.IsValid() || e.String() != ap.String() {
			t.Errorf("%s: endpoint %v (%v, %d)", s, e, e.Addr(), e.Port())
		}
		if e.As16() != ap.Addr().As16() {
			t.Errorf("%s: As16 %v, want %v", s, e.As16(), ap.Addr().As16())
		}
		if w := e.WithPort(7); w.AddrPort() != netip.AddrPortFrom(ap.Addr(), 7) || e.Port() != ap.Port() {
			t.Errorf("%s: WithPort(7) %v", s, w)
		}
		b, err := json.Marshal(e)
		var back Endpoint
		if err != nil || json.Unmarshal(b, &back) != nil || back != e {
			t.Errorf("%s: JSON %s (%v) read back as %v", s, b, err, back)
		}
	}
	v4, mapped := EndpointOf(netip.MustParseAddrPort("10.0.0.1:5")), EndpointOf(netip.MustParseAddrPort("[::ffff:10.0.0.1]:5"))
	if v4 == mapped || v4.Compare(mapped) >= 0 || v4.As16() != mapped.As16() {
		t.Errorf("10.0.0.1 and ::ffff:10.0.0.1: equal %v, compare %d", v4 == mapped, v4.Compare(mapped))
	}
	if Endpoint4([4]byte{10, 0, 0, 1}, 5) != v4 || Endpoint6(mapped.As16(), 5) != mapped {
		t.Error("Endpoint4 and Endpoint6 differ from EndpointOf")
	}
	var zero Endpoint
	if zero.IsValid() || zero.Addr().IsValid() || zero.String() != (netip.AddrPort{}).String() || EndpointOf(netip.AddrPort{}) != zero {
		t.Errorf("zero endpoint: %v", zero)
	}
	if b, _ := json.Marshal(zero); string(b) != `""` {
		t.Errorf("zero endpoint as JSON: %s", b)
	}
	if err := zero.UnmarshalText([]byte("[fe80::1%eth0]:80")); err == nil {
		t.Error("an address with a zone was read")
	}
}

// FuzzEndpointText: what netip reads without a zone, an Endpoint reads
// the same; what netip refuses, it refuses.
func FuzzEndpointText(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "[::1]:80", "[::ffff:1.2.3.4]:9", "", "[fe80::1%lo]:1", "1.2.3.4", "[::1]:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ap netip.AddrPort
		apErr := ap.UnmarshalText([]byte(s))
		var e Endpoint
		err := e.UnmarshalText([]byte(s))
		switch {
		case apErr != nil:
			if err == nil {
				t.Fatalf("%q: read as %v, netip says %v", s, e, apErr)
			}
		case ap.Addr().Zone() != "":
			if err == nil {
				t.Fatalf("%q: zone read", s)
			}
		case err != nil || e.AddrPort() != ap:
			t.Fatalf("%q: %v (%v), netip %v", s, e, err, ap)
		}
	})
}

// TestFlags: unknown bits are left out of JSON and read back unknown;
// known ones, zero included, are the number.
func TestFlags(t *testing.T) {
	sk := Socket{State: Established, Shutdown: FlagsOf(0), BufLock: FlagsOf(3)}
	b, err := json.Marshal(&sk)
	if err != nil {
		t.Fatal(err)
	}
	var back Socket
	if err := json.Unmarshal(b, &back); err != nil || back.Shutdown != sk.Shutdown || back.BufLock != sk.BufLock {
		t.Errorf("%s read back as shutdown %v, buf_lock %v (%v)", b, back.Shutdown, back.BufLock, err)
	}
	if got := string(sk.AppendJSON(nil)); got != string(b) {
		t.Errorf("AppendJSON %s, encoding/json %s", got, b)
	}
	sk.Shutdown, sk.BufLock = Flags{}, Flags{}
	b, _ = json.Marshal(&sk)
	if err := json.Unmarshal([]byte(`{"shutdown":null,"buf_lock":2}`), &back); err != nil || back.Shutdown.Known() || back.BufLock.Bits() != 2 {
		t.Errorf("null shutdown: %v, buf_lock %v (%v)", back.Shutdown, back.BufLock, err)
	}
	if string(b) != string(sk.AppendJSON(nil)) || json.Unmarshal([]byte(`{"shutdown":256}`), &back) == nil || json.Unmarshal([]byte(`{"buf_lock":-1}`), &back) == nil {
		t.Errorf("unknown flags: %s; out-of-range bits must be refused", b)
	}
	for _, name := range []string{`"shutdown"`, `"buf_lock"`} {
		if strings.Contains(string(b), name) {
			t.Errorf("unknown %s written: %s", name, b)
		}
	}
}

// TestEndpointAddr: IsUnspecified and SameAddr answer as netip.Addr's
// IsUnspecified and == do.
func TestEndpointAddr(t *testing.T) {
	addrs := []string{"0.0.0.0:1", "[::]:1", "[::ffff:0.0.0.0]:1", "127.0.0.1:1", "[::ffff:127.0.0.1]:2", "[::1]:1", "10.0.0.1:3", "[2001:db8::1]:1"}
	for _, a := range addrs {
		ea := EndpointOf(netip.MustParseAddrPort(a))
		if ea.IsUnspecified() != ea.Addr().IsUnspecified() {
			t.Errorf("%s: IsUnspecified %v", a, ea.IsUnspecified())
		}
		for _, b := range addrs {
			eb := EndpointOf(netip.MustParseAddrPort(b))
			if ea.SameAddr(eb) != (ea.Addr() == eb.Addr()) {
				t.Errorf("%s and %s: SameAddr %v", a, b, ea.SameAddr(eb))
			}
		}
	}
	if (Endpoint{}).IsUnspecified() || !(Endpoint{}).SameAddr(Endpoint{}) {
		t.Error("the zero endpoint: unspecified, or not its own address")
	}
}

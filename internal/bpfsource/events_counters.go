package bpfsource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Drop is packets the kernel dropped for one reason in one namespace.
type Drop struct {
	// Reason is the kernel's skb_drop_reason without its prefix
	// (TCP_LISTEN_OVERFLOW, NO_SOCKET, ...), or "reason N" for a number
	// the kernel's BTF does not name.
	Reason string
	// Listener is the listening socket for TCP_LISTEN_OVERFLOW (each
	// drop is a handshake that found its accept queue full); invalid
	// otherwise.
	Listener netip.AddrPort
	Count    uint64
}

// Retransmit is segments retransmitted towards one peer.
type Retransmit struct {
	// Peer is the remote end. For connections this host accepted the
	// port is 0 (one entry per client address, not per connection) and
	// LocalPort is the port they came in on.
	Peer      netip.AddrPort
	LocalPort uint16
	// SYN: the socket was in SYN_SENT, so these are SYNs nobody
	// answered: the client side of a full accept queue, a lost SYN or a
	// dead peer.
	SYN   bool
	Count uint64
}

// Reset is resets sent or received with one peer for one reason.
type Reset struct {
	// Sent is true for resets this host sent, false for received ones.
	Sent bool
	// Reason is the kernel's sk_rst_reason without its prefix
	// (TCP_ABORT_ON_LINGER, NO_SOCKET, ...) for sent resets; "" for
	// received ones (the peer does not say why).
	Reason string
	// Peer and LocalPort as in Retransmit; a reset answering a packet
	// for no socket keys by the local port the packet was sent to.
	Peer      netip.AddrPort
	LocalPort uint16
	Count     uint64
}

// Missing names a program that is not running and why.
type Missing struct {
	// Program is the attach point: inet_sock_set_state, kfree_skb,
	// tcp_retransmit_skb, tcp_send_reset or tcp_receive_reset.
	Program string
	Reason  string
}

func (m Missing) String() string { return m.Program + ": " + m.Reason }

// reasonNames are the kernel's names for drop and reset reasons, read
// from its BTF (the numbers differ between kernels).
type reasonNames struct {
	drops, resets map[uint32]string
}

func (n *reasonNames) drop(r uint32) string {
	if s, ok := n.drops[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", r)
}

func (n *reasonNames) reset(r uint32) string {
	if s, ok := n.resets[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", r)
}

// enumNames reads enum name from the kernel BTF with prefix cut off each
// value's name; nil when the kernel has no such enum.
func enumNames(spec *btf.Spec, name string, prefixes ...string) map[uint32]string {
	var e *btf.Enum
	if err := spec.TypeByName(name, &e); err != nil {
		return nil
	}
	m := make(map[uint32]string, len(e.Values))
	for _, v := range e.Values {
		s := v.Name
		for _, p := range prefixes {
			if c, ok := strings.CutPrefix(s, p); ok {
				s = c
				break
			}
		}
		m[uint32(v.Value)] = s
	}
	return m
}

// hasEnumValue reports whether the kernel BTF's enum has a value called
// value.
func hasEnumValue(spec *btf.Spec, enum, value string) bool {
	var e *btf.Enum
	if err := spec.TypeByName(enum, &e); err != nil {
		return false
	}
	for _, v := range e.Values {
		if v.Name == value {
			return true
		}
	}
	return false
}

// dropValue returns the number of the drop reason named name, if present.
func (n *reasonNames) dropValue(name string) (uint32, bool) {
	for v, s := range n.drops {
		if s == name {
			return v, true
		}
	}
	return 0, false
}

// sharedMaps are created once and handed to every program: the ring of
// events, the lost counters and the counting maps of events.c.
type sharedMaps struct {
	ring, lost, stream, drops, retrans, resets *ebpf.Map
}

func (m *sharedMaps) close() error {
	var errs []error
	for _, mp := range []*ebpf.Map{m.ring, m.lost, m.stream, m.drops, m.retrans, m.resets} {
		if mp != nil {
			errs = append(errs, mp.Close())
		}
	}
	return errors.Join(errs...)
}

func newSharedMaps(spec *ebpf.CollectionSpec) (sharedMaps, error) {
	var m sharedMaps
	for _, x := range []struct {
		name string
		dst  **ebpf.Map
	}{{eventsMapEvents, &m.ring}, {eventsMapEvLost, &m.lost}, {eventsMapEvStream, &m.stream},
		{eventsMapDrops, &m.drops}, {eventsMapRetrans, &m.retrans}, {eventsMapResets, &m.resets}} {
		mp, err := ebpf.NewMap(spec.Maps[x.name])
		if err != nil {
			_ = m.close()
			return sharedMaps{}, loadError(fmt.Errorf("create map %s: %w", x.name, err))
		}
		*x.dst = mp
	}
	return m, nil
}

func (m *sharedMaps) replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		eventsMapEvents: m.ring, eventsMapEvLost: m.lost, eventsMapEvStream: m.stream,
		eventsMapDrops: m.drops, eventsMapRetrans: m.retrans, eventsMapResets: m.resets,
	}
}

// tracepointParams returns the parameter types of the BTF tracepoint
// name (its btf_trace_ typedef), the context pointer first.
func tracepointParams(spec *btf.Spec, name string) ([]btf.FuncParam, error) {
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &td); err != nil {
		return nil, notSupported("kernel has no %s tracepoint: %v", name, err)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return nil, notSupported("%s: unexpected tracepoint type %v", name, td.Type)
	}
	proto, ok := btf.UnderlyingType(ptr.Target).(*btf.FuncProto)
	if !ok {
		return nil, notSupported("%s: unexpected tracepoint type %v", name, ptr.Target)
	}
	return proto.Params, nil
}

// isEnum reports whether t is (a qualified) enum called name.
func isEnum(t btf.Type, name string) bool {
	e, ok := btf.UnderlyingType(t).(*btf.Enum)
	return ok && e.Name == name
}

// eventProgram is one program of events.c and how to check that the
// kernel's tracepoint matches what it reads.
type eventProgram struct {
	prog, tracepoint string
	// check inspects the tracepoint's parameters (context first) and
	// sets the program's variables in spec.
	check func(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error
}

// eventPrograms lists the programs of events.c in load order.
func eventPrograms() []eventProgram {
	return []eventProgram{
		{eventsProgDrop, "kfree_skb", checkDrop},
		{eventsProgRetransmit, "tcp_retransmit_skb", checkSockFirst},
		{eventsProgResetSent, "tcp_send_reset", checkSendReset},
		{eventsProgResetReceived, "tcp_receive_reset", checkSockFirst},
	}
}

// checkDrop wants (ctx, skb, location, reason[, rx_sk]): the reason came
// in 5.17 and rx_sk (the listener of TCP_LISTEN_OVERFLOW) in 6.11.
func checkDrop(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error {
	if len(params) < 4 || !isEnum(params[3].Type, "skb_drop_reason") {
		return notSupported("kfree_skb has no drop reason argument (Linux 5.17 added it)")
	}
	if names.drops == nil {
		return notSupported("kernel BTF has no enum skb_drop_reason")
	}
	set := func(v string, x uint32) error { return spec.Variables[v].Set(x) }
	if len(params) >= 5 {
		if err := set(eventsVarDropHasRxSk, 1); err != nil {
			return err
		}
	}
	// The loader compares against the kernel's own numbers; a name this
	// kernel lacks gets a number no reason has.
	for v, name := range map[string]string{
		eventsVarDropListenOverflow: "TCP_LISTEN_OVERFLOW",
		eventsVarDropSkipA:          "NOT_SPECIFIED", // also every kfree_skb() without a reason
		eventsVarDropSkipB:          "QUEUE_PURGE",   // every normal close frees its queues
		eventsVarDropSkipBelow:      "NOT_SPECIFIED", // NOT_DROPPED_YET and CONSUMED are below
	} {
		n, ok := names.dropValue(name)
		if !ok {
			n = 1<<32 - 1
			if v == eventsVarDropSkipBelow {
				n = 0
			}
		}
		if err := set(v, n); err != nil {
			return err
		}
	}
	return nil
}

func checkSockFirst(params []btf.FuncParam, _ *ebpf.CollectionSpec, _ *reasonNames) error {
	if len(params) < 2 {
		return notSupported("tracepoint has no socket argument")
	}
	if !isSockPtr(params[1].Type) {
		return notSupported("argument 1 is %v, not a pointer to struct sock", params[1].Type)
	}
	return nil
}

// checkSendReset wants (ctx, sk, skb, reason): the reason came in 6.10.
func checkSendReset(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error {
	if err := checkSockFirst(params, spec, names); err != nil {
		return err
	}
	if len(params) < 4 || !isEnum(params[3].Type, "sk_rst_reason") {
		return notSupported("tcp_send_reset has no reason argument (Linux 6.10 added it)")
	}
	if names.resets == nil {
		return notSupported("kernel BTF has no enum sk_rst_reason")
	}
	return nil
}

func isSockPtr(t btf.Type) bool {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return false
	}
	st, ok := btf.UnderlyingType(p.Target).(*btf.Struct)
	return ok && st.Name == "sock"
}

// openEventProgram loads one program of events.c alone (the others not
// even in its collection) against the shared maps, and attaches it. It
// works on a copy of espec, the parsed events.c, which it leaves as is.
func (s *Source) openEventProgram(ksp *btf.Spec, espec *ebpf.CollectionSpec, ep eventProgram) error {
	params, err := tracepointParams(ksp, ep.tracepoint)
	if err != nil {
		return err
	}
	spec := espec.Copy()
	if err := spec.Variables[eventsVarWakeupBytes].Set(uint64(wakeupBytes)); err != nil {
		return fmt.Errorf("bpfsource: %w", err)
	}
	if err := ep.check(params, spec, &s.names); err != nil {
		return err
	}
	for name := range spec.Programs {
		if name != ep.prog {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: s.shared.replacements(), Cache: s.cache})
	if err != nil {
		return loadError(err)
	}
	prog := coll.DetachProgram(ep.prog)
	coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		_ = prog.Close()
		return loadError(fmt.Errorf("attach tp_btf/%s: %w", ep.tracepoint, err))
	}
	s.progs = append(s.progs, prog)
	s.progNames = append(s.progNames, ep.tracepoint)
	s.links = append(s.links, l)
	return nil
}

// wakeupBytes is how much waits in the ring before the kernel wakes the
// reader (BPF_RB_NO_WAKEUP below it).
const wakeupBytes = 64 << 10

// Sizes of struct drop_key and struct peer_key (bpf/events.c).
const (
	dropKeySize = 32
	peerKeySize = 32
)

func addrOf(fam uint16, b []byte) (netip.Addr, error) {
	switch fam {
	case unix.AF_INET:
		return netip.AddrFrom4([4]byte(b[:4])), nil
	case unix.AF_INET6:
		return netip.AddrFrom16([16]byte(b[:16])).Unmap(), nil
	}
	return netip.Addr{}, fmt.Errorf("bpfsource: entry of address family %d", fam)
}

// decodeDrop decodes one drops entry: its namespace and Drop.
func decodeDrop(names *reasonNames, key []byte, count uint64) (uint64, Drop, error) {
	if len(key) != dropKeySize {
		return 0, Drop{}, fmt.Errorf("bpfsource: drop key of %d bytes, want %d", len(key), dropKeySize)
	}
	ne := binary.NativeEndian
	d := Drop{Reason: names.drop(ne.Uint32(key[4:])), Count: count}
	if fam := ne.Uint16(key[26:]); fam != 0 {
		a, err := addrOf(fam, key[8:24])
		if err != nil {
			return 0, Drop{}, err
		}
		d.Listener = netip.AddrPortFrom(a, ne.Uint16(key[24:]))
	}
	return uint64(ne.Uint32(key[0:])), d, nil
}

// decodePeer decodes one retrans or resets entry: namespace, reason
// number, peer, local port and the flag byte (syn, or sent).
func decodePeer(key []byte) (ns uint64, reason uint32, peer netip.AddrPort, lport uint16, flag bool, err error) {
	if len(key) != peerKeySize {
		return 0, 0, peer, 0, false, fmt.Errorf("bpfsource: peer key of %d bytes, want %d", len(key), peerKeySize)
	}
	ne := binary.NativeEndian
	a, err := addrOf(ne.Uint16(key[28:]), key[8:24])
	if err != nil {
		return 0, 0, peer, 0, false, err
	}
	return uint64(ne.Uint32(key[0:])), ne.Uint32(key[4:]), netip.AddrPortFrom(a, ne.Uint16(key[24:])),
		ne.Uint16(key[26:]), key[30] != 0, nil
}

// drain reads and deletes every entry of a map with keys of size n (at
// most limit+1 of them), calling fn for each with its value.
func drain[V any](m *ebpf.Map, n, limit int, fn func(key []byte, val V) error) error {
	if m == nil {
		return nil
	}
	var keys []byte // n bytes a key
	k := make([]byte, n)
	var v V
	it := m.Iterate()
	for len(keys) <= limit*n && it.Next(&k, &v) {
		keys = append(keys, k...)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for off := 0; off < len(keys); off += n {
		key := keys[off : off+n]
		if err := m.LookupAndDelete(key, &v); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue
			}
			return err
		}
		if err := fn(key, v); err != nil {
			return err
		}
	}
	return nil
}

// readCounters adds the drop, retransmit and reset counts to r.
func (s *Source) readCounters(r *Reading) error {
	if s.shared.drops == nil {
		return nil
	}
	err := drain(s.shared.drops, dropKeySize, 4096, func(key []byte, n uint64) error {
		ns, d, err := decodeDrop(&s.names, key, n)
		if err == nil {
			r.Drops[ns] = append(r.Drops[ns], d)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read drops: %w", err)
	}
	err = drain(s.shared.retrans, peerKeySize, 8192, func(key []byte, n uint64) error {
		ns, _, peer, lport, syn, err := decodePeer(key)
		if err == nil {
			r.Retransmits[ns] = append(r.Retransmits[ns], Retransmit{Peer: peer, LocalPort: lport, SYN: syn, Count: n})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read retransmits: %w", err)
	}
	err = drain(s.shared.resets, peerKeySize, 4096, func(key []byte, n uint64) error {
		ns, reason, peer, lport, sent, err := decodePeer(key)
		if err == nil {
			rs := Reset{Sent: sent, Peer: peer, LocalPort: lport, Count: n}
			if sent {
				rs.Reason = s.names.reset(reason)
			}
			r.Resets[ns] = append(r.Resets[ns], rs)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read resets: %w", err)
	}
	var lost [lostSlots]uint64
	for i := range lost {
		var n uint64
		if err := s.shared.lost.Lookup(uint32(i), &n); err != nil {
			return fmt.Errorf("bpfsource: read lost: %w", err)
		}
		lost[i] = n - s.lost[i]
		s.lost[i] = n
	}
	r.LostDrops, r.LostRetransmits, r.LostResets, r.LostEvents = lost[0], lost[1], lost[2], lost[3]
	return nil
}

// lostSlots is the size of ev_lost (bpf/events_shared.h).
const lostSlots = 4

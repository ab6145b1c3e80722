// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// rawBTF is a scan of raw BTF (/sys/kernel/btf/vmlinux) that answers
// the few questions the owners iterator asks: the ID of one function and
// where a handful of struct members sit. cilium/ebpf answers them too,
// but only after decoding every type the attach point and the relocated
// structs reach (task_struct reaches most of the kernel): loading the
// iterator takes 8 times as long that way (BenchmarkOwnersLoad).
type rawBTF struct {
	order binary.ByteOrder
	types []byte
	strs  []byte
	offs  []uint32 // offset in types of type ID i+1
}

// BTF kinds (include/uapi/linux/btf.h).
const (
	btfInt       = 1
	btfPtr       = 2
	btfArray     = 3
	btfStruct    = 4
	btfUnion     = 5
	btfEnum      = 6
	btfFwd       = 7
	btfTypedef   = 8
	btfVolatile  = 9
	btfConst     = 10
	btfRestrict  = 11
	btfFunc      = 12
	btfFuncProto = 13
	btfVar       = 14
	btfDatasec   = 15
	btfFloat     = 16
	btfDeclTag   = 17
	btfTypeTag   = 18
	btfEnum64    = 19
)

const btfTypeSize = 12 // struct btf_type: name_off, info, size/type

// parseBTF indexes raw BTF: the header, then one pass over the types to
// find where each starts. Anything a kernel would not write is an error.
func parseBTF(raw []byte) (*rawBTF, error) {
	if len(raw) < 24 {
		return nil, errors.New("btf: shorter than its header")
	}
	var bo binary.ByteOrder
	switch {
	case binary.LittleEndian.Uint16(raw) == 0xeb9f:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint16(raw) == 0xeb9f:
		bo = binary.BigEndian
	default:
		return nil, errors.New("btf: bad magic")
	}
	hdrLen := uint64(bo.Uint32(raw[4:]))
	typeOff, typeLen := uint64(bo.Uint32(raw[8:])), uint64(bo.Uint32(raw[12:]))
	strOff, strLen := uint64(bo.Uint32(raw[16:])), uint64(bo.Uint32(raw[20:]))
	if hdrLen < 24 || hdrLen > uint64(len(raw)) {
		return nil, fmt.Errorf("btf: header length %d", hdrLen)
	}
	body := raw[hdrLen:]
	if typeOff+typeLen > uint64(len(body)) || strOff+strLen > uint64(len(body)) {
		return nil, errors.New("btf: sections past the end")
	}
	b := &rawBTF{order: bo, types: body[typeOff : typeOff+typeLen], strs: body[strOff : strOff+strLen]}
	b.offs = make([]uint32, 0, len(b.types)/32)
	for off := 0; off < len(b.types); {
		n, err := b.typeLen(off)
		if err != nil {
			return nil, fmt.Errorf("btf: type %d: %w", len(b.offs)+1, err)
		}
		b.offs = append(b.offs, uint32(off))
		off += n
	}
	return b, nil
}

// typeLen is the length of the type record at off, trailing data
// included.
func (b *rawBTF) typeLen(off int) (int, error) {
	if off+btfTypeSize > len(b.types) {
		return 0, errors.New("truncated")
	}
	info := b.order.Uint32(b.types[off+4:])
	vlen := int(info & 0xffff)
	var extra int
	switch kind := (info >> 24) & 0x1f; kind {
	case btfPtr, btfFwd, btfTypedef, btfVolatile, btfConst, btfRestrict, btfFunc, btfFloat, btfTypeTag:
	case btfInt, btfVar, btfDeclTag:
		extra = 4
	case btfArray:
		extra = 12
	case btfStruct, btfUnion, btfDatasec, btfEnum64:
		extra = 12 * vlen
	case btfEnum, btfFuncProto:
		extra = 8 * vlen
	default:
		return 0, fmt.Errorf("unknown kind %d", kind)
	}
	n := btfTypeSize + extra
	if off+n > len(b.types) {
		return 0, errors.New("truncated")
	}
	return n, nil
}

// kind, name and size (or referenced type) of type id.
func (b *rawBTF) header(id uint32) (kind uint32, nameOff uint32, info uint32, sizeOrType uint32, off int) {
	off = int(b.offs[id-1])
	t := b.types[off:]
	info = b.order.Uint32(t[4:])
	return (info >> 24) & 0x1f, b.order.Uint32(t), info, b.order.Uint32(t[8:]), off
}

// name is the string at off, or "" when off is outside the strings.
func (b *rawBTF) name(off uint32) []byte {
	if int(off) >= len(b.strs) {
		return nil
	}
	s := b.strs[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return nil
}

// find is the ID of the first type of kind called each of names, in one
// pass over the types.
func (b *rawBTF) find(kind uint32, names ...string) ([]uint32, error) {
	ids := make([]uint32, len(names))
	left := len(names)
	for i := 0; i < len(b.offs) && left > 0; i++ {
		t := b.types[b.offs[i]:]
		if (b.order.Uint32(t[4:])>>24)&0x1f != kind {
			continue
		}
		n := b.name(b.order.Uint32(t))
		for j, want := range names {
			if ids[j] == 0 && string(n) == want {
				ids[j] = uint32(i + 1)
				left--
			}
		}
	}
	for j, id := range ids {
		if id == 0 {
			return nil, fmt.Errorf("btf: no %s %s", kindName(kind), names[j])
		}
	}
	return ids, nil
}

func kindName(k uint32) string {
	switch k {
	case btfStruct:
		return "struct"
	case btfFunc:
		return "function"
	}
	return fmt.Sprintf("kind %d", k)
}

// member finds member name of struct id (called sname, for errors): its
// byte offset and size, and whether it is a pointer. Members of anonymous
// structs and unions count as the struct's own, as in C.
func (b *rawBTF) member(id uint32, sname, name string) (field, error) {
	f, ok, err := b.memberOf(id, name, 0, 0)
	if err != nil {
		return field{}, fmt.Errorf("btf: %s.%s: %w", sname, name, err)
	}
	if !ok {
		return field{}, fmt.Errorf("btf: struct %s has no member %s", sname, name)
	}
	return f, nil
}

// field is where a struct member sits and what it holds.
type field struct {
	off, size uint32
	ptr       bool
}

func (b *rawBTF) memberOf(id uint32, name string, base uint32, depth int) (field, bool, error) {
	if depth > 8 {
		return field{}, false, errors.New("anonymous members nest too deep")
	}
	if !b.valid(id) {
		return field{}, false, fmt.Errorf("type %d out of range", id)
	}
	kind, _, info, _, off := b.header(id)
	if kind != btfStruct && kind != btfUnion {
		return field{}, false, nil
	}
	bitfields := info>>31 == 1
	for i := range int(info & 0xffff) {
		m := b.types[off+btfTypeSize+12*i:]
		mname, mtype, bits := b.order.Uint32(m), b.order.Uint32(m[4:]), b.order.Uint32(m[8:])
		if bitfields {
			if bits>>24 != 0 {
				continue // a bit field: never one of ours
			}
			bits &= 0xffffff
		}
		if bits%8 != 0 {
			continue
		}
		at := base + bits/8
		switch n := b.name(mname); {
		case string(n) == name:
			size, ptr, err := b.size(mtype)
			return field{off: at, size: size, ptr: ptr}, err == nil, err
		case len(n) == 0:
			if f, ok, err := b.memberOf(b.resolve(mtype), name, at, depth+1); ok || err != nil {
				return f, ok, err
			}
		}
	}
	return field{}, false, nil
}

func (b *rawBTF) valid(id uint32) bool { return id >= 1 && int(id) <= len(b.offs) }

// resolve follows typedefs and qualifiers to the type they name.
func (b *rawBTF) resolve(id uint32) uint32 {
	for range 32 {
		if !b.valid(id) {
			return id
		}
		switch kind, _, _, ref, _ := b.header(id); kind {
		case btfTypedef, btfVolatile, btfConst, btfRestrict, btfTypeTag:
			id = ref
		default:
			return id
		}
	}
	return id
}

// size of type id in bytes, and whether it is a pointer.
func (b *rawBTF) size(id uint32) (uint32, bool, error) {
	id = b.resolve(id)
	if !b.valid(id) {
		return 0, false, fmt.Errorf("type %d out of range", id)
	}
	switch kind, _, _, size, _ := b.header(id); kind {
	case btfPtr:
		return 8, true, nil
	case btfInt, btfEnum, btfEnum64, btfStruct, btfUnion, btfFloat:
		return size, false, nil
	default:
		return 0, false, fmt.Errorf("member of %s", kindName(kind))
	}
}

// want is a struct member a program loads: where its place goes, its
// struct (an index in the structs scanLayout is given), whether it is a
// pointer, and the sizes it may have (none: any).
type want struct {
	dst   *field
	in    int
	name  string
	ptr   bool
	sizes []uint32
}

// scanLayout finds in raw BTF the function attach (an iterator's attach
// point) and each member of wants, checking each is what the program
// loads (a wrong guess would only be refused by the verifier, but the
// check says which member differs); it returns attach's type id.
func scanLayout(raw []byte, attach string, structs []string, wants []want) (uint32, error) {
	b, err := parseBTF(raw)
	if err != nil {
		return 0, err
	}
	fn, err := b.find(btfFunc, attach)
	if err != nil {
		return 0, err
	}
	ids, err := b.find(btfStruct, structs...)
	if err != nil {
		return 0, err
	}
	for _, m := range wants {
		sname := structs[m.in]
		f, err := b.member(ids[m.in], sname, m.name)
		if err != nil {
			return 0, err
		}
		if f.ptr != m.ptr || len(m.sizes) > 0 && !slices.Contains(m.sizes, f.size) || f.off > 0x7fff {
			return 0, fmt.Errorf("btf: %s.%s is %d bytes at %d (pointer %v), not what the program loads", sname, m.name, f.size, f.off, f.ptr)
		}
		*m.dst = f
	}
	return fn[0], nil
}

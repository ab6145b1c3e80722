// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// testKernelBTF is raw BTF laid out as a kernel's could be: members at
// odd offsets, one inside an anonymous union, typedef'd integers, a
// bit field and a forward declaration before the struct.
func testKernelBTF(t testing.TB, inoSize uint32) []byte {
	t.Helper()
	s32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	u16 := &btf.Int{Name: "unsigned short", Size: 2}
	ulong := &btf.Int{Name: "unsigned long", Size: inoSize}
	pidT := &btf.Typedef{Name: "pid_t", Type: s32}
	umode := &btf.Typedef{Name: "umode_t", Type: u16}
	seqFile := &btf.Struct{Name: "seq_file", Size: 8}
	meta := &btf.Struct{Name: "bpf_iter_meta", Size: 24, Members: []btf.Member{
		{Name: "seq", Type: &btf.Pointer{Target: seqFile}, Offset: 0},
	}}
	task := &btf.Struct{Name: "task_struct", Size: 2048, Members: []btf.Member{
		{Name: "flags", Type: s32, Offset: 0, BitfieldSize: 3},
		{Name: "pid", Type: pidT, Offset: 1264 * 8},
		{Name: "", Type: &btf.Union{Size: 4, Members: []btf.Member{
			{Name: "tgid", Type: &btf.Volatile{Type: pidT}},
		}}, Offset: 1268 * 8},
	}}
	inode := &btf.Struct{Name: "inode", Size: 128, Members: []btf.Member{
		{Name: "i_mode", Type: umode, Offset: 0},
		{Name: "i_ino", Type: ulong, Offset: 64 * 8},
	}}
	file := &btf.Struct{Name: "file", Size: 64, Members: []btf.Member{
		{Name: "f_inode", Type: &btf.Pointer{Target: inode}, Offset: 32 * 8},
	}}
	fn := &btf.Func{Name: "bpf_iter_task_file", Type: &btf.FuncProto{Return: s32, Params: []btf.FuncParam{
		{Name: "meta", Type: &btf.Pointer{Target: meta}},
		{Name: "task", Type: &btf.Pointer{Target: task}},
		{Name: "fd", Type: s32},
		{Name: "file", Type: &btf.Pointer{Target: file}},
	}}, Linkage: btf.GlobalFunc}
	b, err := btf.NewBuilder([]btf.Type{&btf.Fwd{Name: "task_struct"}, fn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestScanOwnersLayout(t *testing.T) {
	l, err := scanOwnersLayout(testKernelBTF(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	want := ownersLayout{
		attachID: l.attachID,
		metaSeq:  field{off: 0, size: 8, ptr: true},
		tgid:     field{off: 1268, size: 4},
		pid:      field{off: 1264, size: 4},
		fInode:   field{off: 32, size: 8, ptr: true},
		iMode:    field{off: 0, size: 2},
		iIno:     field{off: 64, size: 8},
	}
	if l != want || l.attachID == 0 {
		t.Errorf("layout %+v, want %+v", l, want)
	}
	if _, err := scanOwnersLayout(testKernelBTF(t, 2)); err == nil || !strings.Contains(err.Error(), "inode.i_ino is 2 bytes") {
		t.Errorf("a 2-byte i_ino: %v, want it refused by name", err)
	}
}

func TestParseBTFRefuses(t *testing.T) {
	raw := testKernelBTF(t, 8)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte{0, 0}, raw[2:]...),
		"truncated": raw[:len(raw)-40],
		"types cut": raw[:24+40],
	} {
		if _, err := scanOwnersLayout(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestScanKernelBTF holds the scan against cilium/ebpf's decoding of the
// running kernel's BTF (readable without root).
func TestScanKernelBTF(t *testing.T) {
	raw, unmap, err := readKernelBTF()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	defer unmap()
	l, err := scanOwnersLayout(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec := kernelSpecWith(t, "bpf_iter_task_file", l.attachID)
	for _, c := range []struct {
		sname, mname string
		got          field
	}{
		{"bpf_iter_meta", "seq", l.metaSeq}, {"task_struct", "tgid", l.tgid}, {"task_struct", "pid", l.pid},
		{"file", "f_inode", l.fInode}, {"inode", "i_mode", l.iMode}, {"inode", "i_ino", l.iIno},
	} {
		if off := memberAt(t, spec, c.sname, c.mname); off != c.got.off {
			t.Errorf("%s.%s at %d, scan says %d", c.sname, c.mname, off, c.got.off)
		}
	}
}

// kernelSpecWith decodes the running kernel's BTF with cilium/ebpf and
// checks the function attach has the id the scan found.
func kernelSpecWith(t *testing.T, attach string, id uint32) *btf.Spec {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var fn *btf.Func
	if err := spec.TypeByName(attach, &fn); err != nil {
		t.Fatal(err)
	}
	if got, err := spec.TypeID(fn); err != nil || uint32(got) != id {
		t.Errorf("%s is %d (%v), scan says %d", attach, got, err, id)
	}
	return spec
}

// memberAt is the byte offset of sname.mname in spec.
func memberAt(t *testing.T, spec *btf.Spec, sname, mname string) uint32 {
	t.Helper()
	var st *btf.Struct
	if err := spec.TypeByName(sname, &st); err != nil {
		t.Fatal(err)
	}
	off, ok := memberOffset(st.Members, mname, 0)
	if !ok {
		t.Fatalf("%s has no %s", sname, mname)
	}
	return off
}

// memberOffset is the byte offset of member name in members, anonymous
// members searched.
func memberOffset(members []btf.Member, name string, base uint32) (uint32, bool) {
	for _, m := range members {
		at := base + uint32(m.Offset)/8
		if m.Name == name {
			return at, true
		}
		if m.Name != "" {
			continue
		}
		var inner []btf.Member
		switch c := btf.UnderlyingType(m.Type).(type) {
		case *btf.Struct:
			inner = c.Members
		case *btf.Union:
			inner = c.Members
		}
		if off, ok := memberOffset(inner, name, at); ok {
			return off, true
		}
	}
	return 0, false
}

func FuzzScanOwnersLayout(f *testing.F) {
	f.Add(testKernelBTF(f, 8))
	f.Add(testKernelBTF(f, 4)[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := scanOwnersLayout(b)
		if err == nil && (l.attachID == 0 || l.tgid.size != 4 || !l.fInode.ptr) {
			t.Fatalf("accepted layout %+v", l)
		}
	})
}

// TestOwnersFastMatches: the program loaded from the scan and the one
// cilium/ebpf loads from bpf/owners.c list the same files of this
// process, sockets with their inodes.
func TestOwnersFastMatches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fast, err := loadOwnersFast()
	if err != nil {
		t.Fatalf("fast load on this kernel: %v", err)
	}
	core, err := loadOwnersCORE(nil)
	if err != nil {
		_ = fast.Close()
		t.Skipf("iter/task_file cannot load here: %v", err)
	}
	list := func(p *FileOwners) [][4]uint32 {
		var out [][4]uint32
		err := p.Files(func(tgid, pid, fd, ino uint32) {
			if int(tgid) == os.Getpid() {
				out = append(out, [4]uint32{tgid, pid, fd, ino})
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out, func(a, b [4]uint32) int { return slices.Compare(a[:], b[:]) })
		return out
	}
	var its []*FileOwners
	for _, p := range []*ebpf.Program{fast, core} {
		o, err := attachOwners(p)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		its = append(its, o)
	}
	// The iterator each listing opens is a file of this process too: the
	// sockets, and the first three files, are what both must show alike.
	var got [2][][4]uint32
	for i, o := range its {
		for _, r := range list(o) {
			if r[3] != 0 || r[2] <= 2 {
				got[i] = append(got[i], r)
			}
		}
	}
	if len(got[0]) < 4 || !slices.Equal(got[0], got[1]) {
		t.Errorf("fast load listed %v, cilium/ebpf's %v; want fds 0-2 and the listener's socket alike", got[0], got[1])
	}
}

// BenchmarkOwnersLoad times loading the owners iterator both ways, each
// from nothing (the cilium/ebpf load parses the kernel's BTF anew).
func BenchmarkOwnersLoad(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loading BPF programs needs root")
	}
	for _, c := range []struct {
		name string
		load func() (*ebpf.Program, error)
	}{
		{"scan", loadOwnersFast},
		{"cilium-ebpf", func() (*ebpf.Program, error) { return loadOwnersCORE(nil) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p, err := c.load()
				if err != nil {
					b.Fatal(err)
				}
				_ = p.Close()
			}
		})
	}
}

// BenchmarkKernelScan is the scan alone: map the kernel's BTF, find the
// attach point and the members.
func BenchmarkKernelScan(b *testing.B) {
	for b.Loop() {
		raw, unmap, err := readKernelBTF()
		if err != nil {
			b.Skipf("no kernel BTF: %v", err)
		}
		if _, err := scanOwnersLayout(raw); err != nil {
			b.Fatal(err)
		}
		unmap()
	}
}

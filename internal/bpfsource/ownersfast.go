// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// ownersLayout is what the owners iterator needs of the running kernel's
// BTF: its attach point and the members it reads.
type ownersLayout struct {
	attachID                                uint32 // FUNC bpf_iter_task_file
	metaSeq, tgid, pid, fInode, iMode, iIno field
}

// scanOwnersLayout reads ownersLayout from raw BTF (scanLayout).
func scanOwnersLayout(raw []byte) (ownersLayout, error) {
	var l ownersLayout
	var err error
	l.attachID, err = scanLayout(raw, "bpf_iter_task_file", []string{"bpf_iter_meta", "task_struct", "file", "inode"}, []want{
		{&l.metaSeq, 0, "seq", true, []uint32{8}},
		{&l.tgid, 1, "tgid", false, []uint32{4}},
		{&l.pid, 1, "pid", false, []uint32{4}},
		{&l.fInode, 2, "f_inode", true, []uint32{8}},
		{&l.iMode, 3, "i_mode", false, []uint32{2}},
		{&l.iIno, 3, "i_ino", false, []uint32{4, 8}},
	})
	return l, err
}

// memSize is the load size of a member of n bytes.
func memSize(n uint32) asm.Size {
	switch n {
	case 2:
		return asm.Half
	case 4:
		return asm.Word
	}
	return asm.DWord
}

// program is bpf/owners.c's file_owners with the offsets filled in from
// the layout: one struct file_owner (tgid, pid, fd, socket inode) per
// open file. The instructions follow what clang emits for owners.c;
// TestOwnersFastMatches checks both give the same records.
func (l ownersLayout) program() asm.Instructions {
	off := func(f field) int16 { return int16(f.off) }
	return asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord),  // 0: meta
		asm.LoadMem(asm.R7, asm.R1, 8, asm.DWord),  // 1: task
		asm.LoadMem(asm.R8, asm.R1, 24, asm.DWord), // 2: file
		asm.LoadMem(asm.R9, asm.R1, 16, asm.DWord), // 3: fd
		jumpImm(asm.JEq, asm.R7, 0, 19),            // 4: no task: goto 24
		jumpImm(asm.JEq, asm.R8, 0, 18),            // 5: no file: goto 24
		asm.LoadMem(asm.R1, asm.R7, off(l.tgid), asm.Word),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, off(l.pid), asm.Word),
		asm.StoreMem(asm.RFP, -12, asm.R1, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R9, asm.Word),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMem(asm.R1, asm.R8, off(l.fInode), asm.DWord),          // 12: inode
		jumpImm(asm.JEq, asm.R1, 0, 5),                                 // 13: none: goto 19
		asm.LoadMem(asm.R2, asm.R1, off(l.iMode), asm.Half),            // 14
		asm.And.Imm(asm.R2, 0o170000),                                  // 15: S_IFMT
		jumpImm(asm.JNE, asm.R2, 0o140000, 2),                          // 16: not S_IFSOCK: goto 19
		asm.LoadMem(asm.R2, asm.R1, off(l.iIno), memSize(l.iIno.size)), // 17
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),                    // 18
		asm.LoadMem(asm.R1, asm.R6, off(l.metaSeq), asm.DWord),         // 19: meta->seq
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.Mov.Imm(asm.R3, 16),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0), // 24
		asm.Return(),
	}
}

// jumpImm is "if dst op imm goto +off", the offset counted from the
// next instruction.
func jumpImm(op asm.JumpOp, dst asm.Register, imm int32, off int16) asm.Instruction {
	return asm.Instruction{OpCode: op.Op(asm.ImmSource), Dst: dst, Offset: off, Constant: int64(imm)}
}

// loadOwnersFast loads the owners iterator with its attach point and
// offsets from scanOwnersLayout, by BPF_PROG_LOAD itself: cilium/ebpf
// would decode the kernel's BTF to find them. Any failure here leaves the
// slower load to try.
func loadOwnersFast() (*ebpf.Program, error) {
	raw, unmap, err := readKernelBTF()
	if err != nil {
		return nil, err
	}
	l, err := scanOwnersLayout(raw)
	unmap()
	if err != nil {
		return nil, err
	}
	return loadIter(l.program(), l.attachID, "file_owners", "iter/task_file")
}

// loadIter loads insns as the iterator program name, attached to the
// vmlinux BTF function attachID (iterator what, for errors).
func loadIter(insns asm.Instructions, attachID uint32, name, what string) (*ebpf.Program, error) {
	var b bytes.Buffer // little-endian, as the hosts the bpfel objects build for
	if err := insns.Marshal(&b, binary.LittleEndian); err != nil {
		return nil, fmt.Errorf("%s program: %w", name, err)
	}
	fd, err := progLoad(b.Bytes(), attachID, name, what)
	if err != nil {
		return nil, err
	}
	p, err := ebpf.NewProgramFromFD(fd)
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return p, nil
}

// readKernelBTF maps /sys/kernel/btf/vmlinux (Linux >= 6.16 allows it),
// or reads it.
func readKernelBTF() ([]byte, func(), error) {
	f, err := os.Open("/sys/kernel/btf/vmlinux")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE); err == nil {
		return b, func() { _ = unix.Munmap(b) }, nil
	}
	b, err := os.ReadFile(f.Name())
	return b, func() {}, err
}

// progLoadAttr is union bpf_attr for BPF_PROG_LOAD up to attach_btf_id
// (include/uapi/linux/bpf.h; pointers are 64-bit fields there, as on the
// 64-bit hosts this builds for); the kernel takes a shorter attr from an
// older caller.
type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              unsafe.Pointer
	license            unsafe.Pointer
	logLevel           uint32
	logSize            uint32
	logBuf             unsafe.Pointer
	kernVersion        uint32
	progFlags          uint32
	progName           [16]byte
	progIfindex        uint32
	expectedAttachType uint32
	progBTFFD          uint32
	funcInfoRecSize    uint32
	funcInfo           unsafe.Pointer
	funcInfoCnt        uint32
	lineInfoRecSize    uint32
	lineInfo           unsafe.Pointer
	lineInfoCnt        uint32
	attachBTFID        uint32
}

// progLoad loads insns as an iterator program called name, attached to
// the vmlinux BTF function attachID (iterator what, for errors), and
// returns its fd.
func progLoad(insns []byte, attachID uint32, name, what string) (int, error) {
	license := []byte("GPL\x00")
	attr := progLoadAttr{
		progType:           unix.BPF_PROG_TYPE_TRACING,
		insnCnt:            uint32(len(insns) / asm.InstructionSize),
		insns:              unsafe.Pointer(&insns[0]),
		license:            unsafe.Pointer(&license[0]),
		expectedAttachType: unix.BPF_TRACE_ITER,
		attachBTFID:        attachID,
	}
	copy(attr.progName[:], name)
	var errno unix.Errno
	// The verifier may be interrupted by a signal, or ask for another try.
	for range 5 {
		var fd uintptr
		fd, _, errno = unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno == 0 {
			return int(fd), nil
		}
		if errno != unix.EINTR && errno != unix.EAGAIN {
			break
		}
	}
	return -1, fmt.Errorf("load %s: %w", what, errno)
}

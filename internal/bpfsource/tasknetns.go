// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// PidNetns is a process (a thread group, by its leader) and the inode of
// its network namespace.
type PidNetns struct {
	Pid, Netns uint32
}

// ProcessNetns lists every process with the inode of its network
// namespace, in one walk of the kernel's tasks (an iter/task program
// built here from the kernel's BTF, as the owners walk is): what a
// readlink of each /proc/PID/ns/net tells, without one system call per
// process. Sorted by pid; a process that is exiting (no namespaces left)
// is not listed. Errors that mean "cannot run here" wrap ErrNotSupported.
func ProcessNetns() ([]PidNetns, error) {
	if err := hostPids(); err != nil {
		return nil, err
	}
	raw, unmap, err := readKernelBTF()
	if err != nil {
		return nil, notSupported("no kernel BTF: %v", err)
	}
	l, err := scanNetnsLayout(raw)
	unmap()
	if err != nil {
		return nil, notSupported("%v", err)
	}
	prog, err := loadIter(l.program(), l.attachID, "task_netns", "iter/task")
	if err != nil {
		return nil, loadError(err)
	}
	defer prog.Close()
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return nil, loadError(fmt.Errorf("attach iter/task: %w", err))
	}
	defer it.Close()
	rc, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("bpfsource: task netns: open iterator: %w", err)
	}
	defer rc.Close()
	out, err := decodeTaskNetns(bufio.NewReaderSize(rc, 64<<10))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b PidNetns) int { return int(a.Pid) - int(b.Pid) })
	return out, nil
}

// taskNetnsSize is one record: the tgid and the namespace's inode.
const taskNetnsSize = 8

// decodeTaskNetns reads records until EOF. A truncated record or one no
// kernel writes (pid or inode 0) is an error.
func decodeTaskNetns(r io.Reader) ([]PidNetns, error) {
	var out []PidNetns
	var b [taskNetnsSize]byte
	ne := binary.NativeEndian
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if err == io.EOF {
				return out, nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return out, fmt.Errorf("bpfsource: task netns: record %d cut short", len(out))
			}
			return out, fmt.Errorf("bpfsource: task netns: %w", err)
		}
		p := PidNetns{Pid: ne.Uint32(b[:]), Netns: ne.Uint32(b[4:])}
		if p.Pid == 0 || p.Netns == 0 {
			return out, fmt.Errorf("bpfsource: task netns: record %d is pid %d in namespace %d, which no kernel writes", len(out), p.Pid, p.Netns)
		}
		out = append(out, p)
	}
}

// netnsLayout is what the task netns iterator needs of the kernel's BTF.
type netnsLayout struct {
	attachID                    uint32 // FUNC bpf_iter_task
	metaSeq, tgid, pid, nsproxy field
	netNS                       field // nsproxy.net_ns
	inum                        field // net.ns.inum: the offsets added
}

// scanNetnsLayout reads netnsLayout from raw BTF (scanLayout); inum's
// offset is net.ns's plus ns_common.inum's.
func scanNetnsLayout(raw []byte) (netnsLayout, error) {
	var l netnsLayout
	var ns field
	var err error
	l.attachID, err = scanLayout(raw, "bpf_iter_task", []string{"bpf_iter_meta", "task_struct", "nsproxy", "net", "ns_common"}, []want{
		{&l.metaSeq, 0, "seq", true, []uint32{8}},
		{&l.tgid, 1, "tgid", false, []uint32{4}},
		{&l.pid, 1, "pid", false, []uint32{4}},
		{&l.nsproxy, 1, "nsproxy", true, []uint32{8}},
		{&l.netNS, 2, "net_ns", true, []uint32{8}},
		{&ns, 3, "ns", false, nil},
		{&l.inum, 4, "inum", false, []uint32{4}},
	})
	if err != nil {
		return l, err
	}
	if l.inum.off+l.inum.size > ns.size {
		return l, fmt.Errorf("btf: ns_common.inum at %d is outside net.ns (%d bytes)", l.inum.off, ns.size)
	}
	if l.inum.off += ns.off; l.inum.off > 0x7fff {
		return l, fmt.Errorf("btf: net.ns.inum at %d is beyond what one load reaches", l.inum.off)
	}
	return l, nil
}

// program writes one record (tgid, net namespace inode) for each thread
// group leader that still has its namespaces:
//
//	if (!task || task->tgid != task->pid || !task->nsproxy || !task->nsproxy->net_ns) return 0;
//	rec = {task->tgid, task->nsproxy->net_ns->ns.inum};
//	if (!rec.inum) return 0;
//	bpf_seq_write(meta->seq, &rec, 8);
func (l netnsLayout) program() asm.Instructions {
	off := func(f field) int16 { return int16(f.off) }
	return asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord), // meta
		asm.LoadMem(asm.R7, asm.R1, 8, asm.DWord), // task
		asm.JEq.Imm(asm.R7, 0, "out"),
		asm.LoadMem(asm.R1, asm.R7, off(l.tgid), asm.Word),
		asm.LoadMem(asm.R2, asm.R7, off(l.pid), asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "out"), // a thread
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, off(l.nsproxy), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "out"), // exiting
		asm.LoadMem(asm.R1, asm.R1, off(l.netNS), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "out"),
		asm.LoadMem(asm.R1, asm.R1, off(l.inum), asm.Word),
		asm.JEq.Imm(asm.R1, 0, "out"), // a read that faulted (a namespace being freed)
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R6, off(l.metaSeq), asm.DWord), // meta->seq
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, taskNetnsSize),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}

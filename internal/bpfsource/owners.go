// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// FileOwners is the loaded iter/task_file program (bpf/owners.c) that
// lists every process's open files, with the inode of each socket: the
// owner walk without a readlink per descriptor. Load it once per process;
// Files may be called from several goroutines at once.
type FileOwners struct {
	prog *ebpf.Program
	link *link.Iter
}

// OpenFileOwners checks the kernel can run the iterator and that its pids
// are this process's (the iterator gives the initial pid namespace's
// numbers), and loads it: from a scan of the kernel's BTF where that
// works (loadOwnersFast), else through cilium/ebpf with k, the kernel BTF
// shared with the command's other loads (nil: parse it here). Errors
// that mean "cannot run here" wrap ErrNotSupported and say why.
func OpenFileOwners(k *Kernel) (*FileOwners, error) {
	if err := hostPids(); err != nil {
		return nil, err
	}
	prog, err := loadOwnersFast()
	if err != nil {
		if prog, err = loadOwnersCORE(k); err != nil {
			return nil, err
		}
	}
	return attachOwners(prog)
}

// attachOwners makes the iterator of a loaded owners program; the
// program is closed if that fails.
func attachOwners(prog *ebpf.Program) (*FileOwners, error) {
	l, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		_ = prog.Close()
		return nil, loadError(fmt.Errorf("attach iter/task_file: %w", err))
	}
	return &FileOwners{prog: prog, link: l}, nil
}

// loadOwnersCORE loads bpf/owners.c through cilium/ebpf, its CO-RE
// relocations and attach point resolved against k.
func loadOwnersCORE(k *Kernel) (*ebpf.Program, error) {
	k = k.orNew() // one parse for the check and the load
	if err := iterSupported(k, "task_file", "5.8"); err != nil {
		return nil, err
	}
	var objs ownersObjects
	if err := loadOwnersObjects(&objs, &ebpf.CollectionOptions{Cache: k.types()}); err != nil {
		return nil, loadError(fmt.Errorf("load iter/task_file: %w", err))
	}
	return objs.FileOwners, nil
}

// hostPids says whether a task iterator can run here with its pids
// meaning what they mean to this process: with the rights to load it,
// in the initial pid namespace (the iterator numbers processes as the
// host does). Its error wraps ErrNotSupported.
func hostPids() error {
	if !privileged() {
		return notSupported(needRoot)
	}
	if b, err := os.ReadFile("/proc/self/status"); err != nil {
		return notSupported("cannot tell this process's pid namespace: %v", err)
	} else if !initialPidNS(b) {
		return notSupported("in a child pid namespace: the iterator numbers processes as the host does")
	}
	return nil
}

// initialPidNS reads /proc/self/status: a process in the initial pid
// namespace has one number on its NSpid line (Linux >= 4.1; without the
// line, nesting cannot be seen, and the answer is no).
func initialPidNS(status []byte) bool {
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			return len(bytes.Fields(rest)) == 1
		}
	}
	return false
}

// Close detaches the iterator and unloads the program.
func (o *FileOwners) Close() error {
	if o == nil {
		return nil
	}
	return errors.Join(o.link.Close(), o.prog.Close())
}

// Files walks every open file of every process, in the kernel's order
// (one task's files together), calling fn for each: tgid and pid as the
// host numbers them, the fd, and the socket inode (0 for other files).
func (o *FileOwners) Files(fn func(tgid, pid, fd, ino uint32)) error {
	rc, err := o.link.Open()
	if err != nil {
		return fmt.Errorf("bpfsource: file owners: open iterator: %w", err)
	}
	defer rc.Close()
	return decodeFileOwners(bufio.NewReaderSize(rc, 64<<10), fn)
}

// fileOwnerSize is sizeof(struct file_owner) (bpf/owners.c).
const fileOwnerSize = 16

// decodeFileOwners reads records of struct file_owner until EOF. A
// truncated record or one no kernel writes is an error; records before
// it have been passed to fn.
func decodeFileOwners(r io.Reader, fn func(tgid, pid, fd, ino uint32)) error {
	var b [fileOwnerSize]byte
	ne := binary.NativeEndian
	for n := 0; ; n++ {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("bpfsource: file owners: record %d truncated", n)
			}
			return fmt.Errorf("bpfsource: file owners: read: %w", err)
		}
		tgid, pid := ne.Uint32(b[0:]), ne.Uint32(b[4:])
		// Pids are positive ints, at most 2^22 (PID_MAX_LIMIT).
		if tgid == 0 || pid == 0 || tgid > 1<<22 || pid > 1<<22 || int32(ne.Uint32(b[8:])) < 0 {
			return fmt.Errorf("bpfsource: file owners: record %d: tgid %d, pid %d or fd %d out of range", n, tgid, pid, int32(ne.Uint32(b[8:])))
		}
		fn(tgid, pid, ne.Uint32(b[8:]), ne.Uint32(b[12:]))
	}
}

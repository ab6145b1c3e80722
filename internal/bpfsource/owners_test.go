// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
)

func rawOwner(tgid, pid, fd, ino uint32) []byte {
	b := make([]byte, fileOwnerSize)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], tgid)
	ne.PutUint32(b[4:], pid)
	ne.PutUint32(b[8:], fd)
	ne.PutUint32(b[12:], ino)
	return b
}

func TestDecodeFileOwners(t *testing.T) {
	in := append(rawOwner(7, 7, 3, 111), rawOwner(7, 8, 0, 0)...)
	var got [][4]uint32
	err := decodeFileOwners(bytes.NewReader(in), func(tgid, pid, fd, ino uint32) { got = append(got, [4]uint32{tgid, pid, fd, ino}) })
	if err != nil || len(got) != 2 || got[0] != [4]uint32{7, 7, 3, 111} || got[1] != [4]uint32{7, 8, 0, 0} {
		t.Errorf("decoded %v, %v", got, err)
	}
	bad := map[string][]byte{
		"truncated":   in[:20],
		"zero tgid":   rawOwner(0, 1, 1, 1),
		"zero pid":    rawOwner(1, 0, 1, 1),
		"huge pid":    rawOwner(1, 1<<23, 1, 1),
		"negative fd": rawOwner(1, 1, 1<<31, 1),
	}
	for name, b := range bad {
		if err := decodeFileOwners(bytes.NewReader(b), func(_, _, _, _ uint32) {}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzDecodeFileOwners(f *testing.F) {
	f.Add(append(rawOwner(7, 7, 3, 111), rawOwner(7, 8, 0, 0)...))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := decodeFileOwners(bytes.NewReader(b), func(tgid, pid, fd, _ uint32) {
			n++
			if tgid == 0 || pid == 0 || tgid > 1<<22 || pid > 1<<22 || fd > 1<<31-1 {
				t.Fatalf("passed tgid %d pid %d fd %d", tgid, pid, fd)
			}
		})
		if err == nil && (len(b)%fileOwnerSize != 0 || n != len(b)/fileOwnerSize) {
			t.Fatalf("%d records from %d bytes without an error", n, len(b))
		}
	})
}

func TestInitialPidNS(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tx\nNSpid:\t42\nNSpgid:\t42\n": true,
		"NSpid:\t42\t7\n":                     false,
		"Name:\tx\n":                          false,
	} {
		if got := initialPidNS([]byte(status)); got != want {
			t.Errorf("initialPidNS(%q) = %v, want %v", status, got, want)
		}
	}
}

func TestOpenFileOwnersNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as non-root: checks the refusal says why")
	}
	_, err := OpenFileOwners(nil)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), needRoot) {
		t.Errorf("OpenFileOwners as non-root = %v, want not supported: %s", err, needRoot)
	}
}

// TestKernelShared: a load given a Kernel that has parsed the kernel's
// BTF does not parse it again: it allocates a fraction of what a load
// with its own parse does.
func TestKernelShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	k := NewKernel()
	if _, err := k.spec(); err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	allocated := func(k *Kernel) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := loadOwnersCORE(k)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Skipf("iter/task_file cannot load here: %v", err)
		}
		_ = p.Close()
		return after.TotalAlloc - before.TotalAlloc
	}
	own, shared := allocated(nil), allocated(k)
	t.Logf("one load allocates %.1f MB with its own parse, %.1f MB sharing one", float64(own)/1e6, float64(shared)/1e6)
	if shared*5 > own*4 {
		t.Errorf("a load sharing the parse allocated %d bytes, its own parse %d: it parsed again", shared, own)
	}
}

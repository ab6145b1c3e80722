package bpfsource

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
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
	_, err := OpenFileOwners()
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "not root") {
		t.Errorf("OpenFileOwners as non-root = %v, want not supported: not root", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestProcessNetns (root): every process /proc listed before the walk,
// whose link read the same before and after it, is in the walk under
// that namespace (processes start, end and change namespace meanwhile:
// other tests run `ip netns`, and pids wrap).
func TestProcessNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF")
	}
	links := func() map[uint32]string {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32]string{}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil {
				out[uint32(pid)] = l
			}
		}
		return out
	}
	before := links()
	got, err := ProcessNetns()
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := links()
	byPid := map[uint32]uint32{}
	for i, p := range got {
		if i > 0 && got[i-1].Pid >= p.Pid {
			t.Fatalf("not sorted by pid: %v then %v", got[i-1], p)
		}
		byPid[p.Pid] = p.Netns
	}
	checked := 0
	for pid, link := range before {
		if after[pid] != link {
			continue
		}
		n, ok := byPid[pid]
		switch {
		case !ok:
			t.Errorf("pid %d (%s) is not in the walk", pid, link)
		case link != "net:["+strconv.FormatUint(uint64(n), 10)+"]":
			t.Errorf("pid %d: the walk says namespace %d, /proc says %s", pid, n, link)
		default:
			checked++
		}
	}
	if self := uint32(os.Getpid()); byPid[self] == 0 {
		t.Errorf("this process (%d) is not in the walk", self)
	}
	if checked < 2 {
		t.Errorf("only %d processes checked", checked)
	}
}

func TestDecodeTaskNetns(t *testing.T) {
	var b bytes.Buffer
	for _, p := range []PidNetns{{1, 4026531840}, {42, 4026532001}} {
		_ = binary.Write(&b, binary.NativeEndian, p)
	}
	got, err := decodeTaskNetns(bytes.NewReader(b.Bytes()))
	if err != nil || len(got) != 2 || got[1] != (PidNetns{42, 4026532001}) {
		t.Fatalf("decode = %v, %v", got, err)
	}
	if _, err := decodeTaskNetns(bytes.NewReader(b.Bytes()[:12])); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a cut record: %v, want cut short", err)
	}
	if _, err := decodeTaskNetns(bytes.NewReader(make([]byte, 8))); err == nil {
		t.Error("pid 0 in namespace 0 was taken")
	}
}

func FuzzDecodeTaskNetns(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeTaskNetns(bytes.NewReader(b))
		if err == nil && len(got) != len(b)/taskNetnsSize {
			t.Fatalf("%d records from %d bytes without an error", len(got), len(b))
		}
		for _, p := range got {
			if p.Pid == 0 || p.Netns == 0 {
				t.Fatalf("record %v taken", p)
			}
		}
	})
}

// TestScanNetnsLayout: the scan against cilium/ebpf's decoding of this
// kernel's BTF.
func TestScanNetnsLayout(t *testing.T) {
	raw, unmap, err := readKernelBTF()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	defer unmap()
	l, err := scanNetnsLayout(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec := kernelSpecWith(t, "bpf_iter_task", l.attachID)
	at := func(sname, mname string) uint32 { return memberAt(t, spec, sname, mname) }
	for _, c := range []struct {
		name      string
		want, got uint32
	}{
		{"bpf_iter_meta.seq", at("bpf_iter_meta", "seq"), l.metaSeq.off},
		{"task_struct.tgid", at("task_struct", "tgid"), l.tgid.off},
		{"task_struct.pid", at("task_struct", "pid"), l.pid.off},
		{"task_struct.nsproxy", at("task_struct", "nsproxy"), l.nsproxy.off},
		{"nsproxy.net_ns", at("nsproxy", "net_ns"), l.netNS.off},
		{"net.ns.inum", at("net", "ns") + at("ns_common", "inum"), l.inum.off},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, scan says %d", c.name, c.want, c.got)
		}
	}
}

// BenchmarkProcessNetns: one walk of every process (root). Compare with
// netns's BenchmarkByProcess, a readlink per process, on the same host.
func BenchmarkProcessNetns(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to load eBPF")
	}
	for b.Loop() {
		if _, err := ProcessNetns(); err != nil {
			b.Fatal(err)
		}
	}
}

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

// TestProcessNetns (root): every process the kernel walk lists is in the
// namespace its /proc/PID/ns/net names, and every process /proc lists
// that is still there is in the walk.
func TestProcessNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF")
	}
	got, err := ProcessNetns()
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	byPid := map[uint32]uint32{}
	for i, p := range got {
		if i > 0 && got[i-1].Pid >= p.Pid {
			t.Fatalf("not sorted by pid: %v then %v", got[i-1], p)
		}
		byPid[p.Pid] = p.Netns
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	if n := byPid[uint32(os.Getpid())]; self != "net:["+strconv.FormatUint(uint64(n), 10)+"]" {
		t.Errorf("this process: the walk says namespace %d, /proc says %s", n, self)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink("/proc/" + e.Name() + "/ns/net")
		if err != nil {
			continue // gone, or exiting
		}
		n, ok := byPid[uint32(pid)]
		if !ok {
			if _, err := os.Stat("/proc/" + e.Name()); err == nil && pid < int(got[len(got)-1].Pid) {
				t.Errorf("pid %d (%s) is not in the walk", pid, link)
			}
			continue
		}
		if want := strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"); strconv.FormatUint(uint64(n), 10) != want {
			t.Errorf("pid %d: the walk says namespace %d, /proc says %s", pid, n, link)
		}
		checked++
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

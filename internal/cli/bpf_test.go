package cli

import (
	"strings"
	"testing"
)

func TestBPFFlag(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--bpf", "bogus"},
		{"sockets", "--bpf", "yes"},
		{"check", "--from", "x.jsonl", "--bpf", "on"},
		{"record", "-o", "-", "--bpf", "maybe"},
		{"serve", "--bpf", "sometimes"},
	} {
		if code, _, stderr := run(t, args...); code != ExitUsage || !strings.Contains(stderr, "--bpf") {
			t.Errorf("%v: exit %d (%s), want %d naming --bpf", args, code, stderr, ExitUsage)
		}
	}
	// The test Env has no loader: on fails with exit 3, auto and off go
	// on quietly.
	if code, _, stderr := run(t, "check", "--interval", "0", "--bpf", "on"); code != ExitCollect || !strings.Contains(stderr, "eBPF") {
		t.Errorf("--bpf on without a loader: exit %d (%s), want %d", code, stderr, ExitCollect)
	}
	for _, mode := range []string{"auto", "off"} {
		if code, _, stderr := run(t, "sockets", "--bpf", mode); code != ExitOK || strings.Contains(stderr, "eBPF") {
			t.Errorf("--bpf %s without a loader: exit %d (%s)", mode, code, stderr)
		}
	}
}

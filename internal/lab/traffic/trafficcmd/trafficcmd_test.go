// SPDX-License-Identifier: Apache-2.0

package trafficcmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
)

func runWorkloadCmd(t *testing.T, stdout io.Writer, args ...string) error {
	t.Helper()
	cmd := New(stdout, t.TempDir())
	cmd.SetArgs(append(args, "--comm", ""))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return cmd.ExecuteContext(context.Background())
}

func TestWorkloadCmdServerAndClient(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := runWorkloadCmd(t, pw, "rpc-server", "--think-max", "2ms", "--duration", "800ms")
		pw.CloseWithError(err)
		done <- err
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("no ready line: %v", lines.Err())
	}
	var ready struct {
		Ready bool   `json:"ready"`
		Addr  string `json:"addr"`
	}
	if err := json.Unmarshal(lines.Bytes(), &ready); err != nil || !ready.Ready || ready.Addr == "" {
		t.Fatalf("ready line %q: %v", lines.Text(), err)
	}

	var out bytes.Buffer
	if err := runWorkloadCmd(t, &out, "rpc-client", "--addr", ready.Addr, "--conns", "2", "--callers", "4",
		"--req-size", "1K", "--count", "20", "--sndbuf", "8K"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Errorf("client printed %d lines, want one: %q", n, out.String())
	}
	var cres traffic.RPCClientResult
	if err := json.Unmarshal(out.Bytes(), &cres); err != nil {
		t.Fatal(err)
	}
	if cres.Requests != 20 || cres.ReqSize != 1024 || cres.RespSize != 2048 || cres.ConnInfo[0].SndBuf != 16384 {
		t.Errorf("client result %+v", cres)
	}

	if !lines.Scan() {
		t.Fatalf("no server result: %v", lines.Err())
	}
	var sres traffic.RPCServerResult
	if err := json.Unmarshal(lines.Bytes(), &sres); err != nil {
		t.Fatal(err)
	}
	if sres.Requests != 20 || sres.Conns != 2 || sres.Addr != ready.Addr {
		t.Errorf("server result %+v", sres)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWorkloadCmdMaxDuration(t *testing.T) {
	var out bytes.Buffer
	start := time.Now()
	if err := runWorkloadCmd(t, &out, "storm-server", "--max-duration", "200ms"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("server ran %v past its 200ms cap", d)
	}
	if got := strings.Count(out.String(), "\n"); got != 2 {
		t.Errorf("want a ready line and a result line, got %q", out.String())
	}
}

func TestWorkloadCmdBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"rpc-client", "--count", "1"},                           // no --addr
		{"bulk-client", "--addr", "127.0.0.1:1", "--size", "-5"}, // negative size
		{"churn-client", "--addr", "127.0.0.1:1", "--rcvbuf", "lots"},
		{"proxy"}, // no backends
		{"storm-server", "--max-duration", "0s"},
	} {
		if err := runWorkloadCmd(t, io.Discard, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestSetComm(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	// As in /proc, the file exists (setComm writes it, never creates it).
	if err := os.WriteFile(filepath.Join(root, "self", "comm"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := os.ReadFile("/proc/thread-self/comm")
	if err != nil {
		t.Skip("no /proc/thread-self:", err)
	}
	defer setComm(t.TempDir(), strings.TrimSpace(string(old)))
	setComm(root, "bigresponse-server")
	if got, _ := os.ReadFile("/proc/thread-self/comm"); strings.TrimSpace(string(got)) != "bigresponse-ser" {
		t.Errorf("thread comm %q, want the first 15 bytes", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "self", "comm")); string(got) != "bigresponse-ser" {
		t.Errorf("comm file %q", got)
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "16K": 16384, "4M": 4 << 20, "3400000": 3400000, "1.5k": 1536} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%q: %d, %v; want %d", in, b, err, want)
		}
	}
	var r bitRate
	if err := r.Set("100M"); err != nil || r != 100e6 {
		t.Errorf("100M: %v, %v", r, err)
	}
	if err := r.Set("100"); err == nil {
		t.Errorf("a bare 100 accepted as a rate")
	}
	for _, bad := range []string{"-1", "NaN", "x", "1e300"} {
		if err := new(byteSize).Set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package appcaps_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/appcaps"
	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// The test binary is also the two children of TestServeHostileConfig:
// a process named nginx in its own mount namespace, and serve in a
// memory cgroup.
const (
	fakeNginxEnv = "TCPDOCTOR_TEST_FAKE_NGINX" // the directory to mount and fill
	fakeKindEnv  = "TCPDOCTOR_TEST_FAKE_KIND"  // self-include or glob
	serveEnv     = "TCPDOCTOR_TEST_SERVE_CGROUP"
	serveArgsEnv = "TCPDOCTOR_TEST_SERVE_ARGS"
)

func TestMain(m *testing.M) {
	if d := os.Getenv(fakeNginxEnv); d != "" {
		os.Exit(fakeNginx(d, os.Getenv(fakeKindEnv)))
	}
	if cg := os.Getenv(serveEnv); cg != "" {
		os.Exit(serveIn(cg, strings.Fields(os.Getenv(serveArgsEnv))))
	}
	os.Exit(m.Run())
}

// fakeNginx runs as a process named nginx, whose title names its
// configuration dir/nginx.conf, in a mount namespace of its own where a
// tmpfs on dir holds that configuration (a self-including 1 MiB file, or
// an include over 16 links to "."); it listens on loopback, says
// "ready", and waits for its stdin to close.
func fakeNginx(dir, kind string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "fake nginx:", err); return 1 }
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		return fail(err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	body := "events { worker_connections 10; }\ninclude " + conf + ";\n" + strings.Repeat(";", 1<<20)
	if kind == "glob" {
		body = "events { worker_connections 10; }\ninclude d/*/*/*/*/*/x.conf;\n"
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
			return fail(err)
		}
		for i := range 16 {
			if err := os.Symlink(".", filepath.Join(dir, "d", fmt.Sprintf("l%02d", i))); err != nil {
				return fail(err)
			}
		}
	}
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return fail(err)
	}
	if err := os.WriteFile("/proc/self/comm", []byte("nginx"), 0); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	fmt.Printf("ready %d\n", ln.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// serveIn joins the memory cgroup cg and runs serve with args.
func serveIn(cg string, args []string) int {
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		fmt.Fprintln(os.Stderr, "join cgroup:", err)
		return 1
	}
	root := cli.NewRoot(cli.DefaultEnv())
	root.SetArgs(append([]string{"serve"}, args...))
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startFakeNginx starts fakeNginx of kind; it returns its pid.
func startFakeNginx(t *testing.T, kind string) int {
	t.Helper()
	dir := t.TempDir()
	cmd := &exec.Cmd{Path: os.Args[0], Args: []string{"nginx: master process nginx -c " + filepath.Join(dir, "nginx.conf")},
		Env:         append(os.Environ(), fakeNginxEnv+"="+dir, fakeKindEnv+"="+kind),
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}, Stderr: os.Stderr}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("fake nginx: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// memoryCgroup makes a cgroup v1 memory cgroup limited to limit bytes,
// removed (after its processes ended) when t ends.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	base := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(base, "memory.limit_in_bytes")); err != nil {
		t.Skipf("no cgroup v1 memory controller at %s: %v", base, err)
	}
	cg := filepath.Join(base, fmt.Sprintf("tcpdoctor-t42-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if err := os.Remove(cg); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s not removed", cg)
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatal(err)
	}
	return cg
}

// startServeIn runs serve (1 s interval) in cgroup cg with the deploy
// files' GOMEMLIMIT; it returns the address it serves on.
func startServeIn(t *testing.T, cg string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveEnv+"="+cg, serveArgsEnv+"=--web.listen-address 127.0.0.1:0 --interval 1s", "GOMEMLIMIT=256MiB")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "serving http://"); ok && !sent {
				a, _, _ := strings.Cut(rest, "/")
				addr <- a
				sent = true
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	return ""
}

var collectionsRe = regexp.MustCompile(`(?m)^tcpdoctor_collections_total (\d+)`)

// TestServeHostileConfig (root): a process named nginx in its own mount
// namespace whose configuration includes itself (1 MiB), or includes
// d/*/*/*/*/*/x.conf over 16 links to ".", does not stop serve, run in
// a 1 GiB memory cgroup as the deploy files run it: metrics come every
// interval, the server's limit is absent and appcaps is down, and the
// reading says why.
func TestServeHostileConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace and a memory cgroup")
	}
	if appcaps.RaceDetector {
		t.Skip("measures serve's intervals; the race detector distorts them (scripts/test.sh runs it without -race)")
	}
	for _, kind := range []string{"self-include", "glob"} {
		t.Run(kind, func(t *testing.T) {
			pid := startFakeNginx(t, kind)
			// The reason, read as serve reads it.
			s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(pid)}},
				Procs: map[int]*snapshot.Proc{pid: {Pid: pid, Command: "nginx"}}}
			start := time.Now()
			appcaps.Reader{ProcRoot: "/proc"}.Fill(s)
			if len(s.AppCaps) != 0 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, "over the budget") {
				t.Fatalf("caps %+v, errors %+v: want the limit unknown, over the budget", s.AppCaps, s.Errors)
			}
			t.Logf("read in %v: %s", time.Since(start), s.Errors[0].Err)

			cg := memoryCgroup(t, 1<<30)
			addr := startServeIn(t, cg)
			client := &http.Client{Timeout: 3 * time.Second}
			limitRe := regexp.MustCompile(`tcpdoctor_app_connection_limit\{[^}]*pid="` + strconv.Itoa(pid) + `"`)
			downRe := regexp.MustCompile(`tcpdoctor_source_up\{[^}]*netns="host"[^}]*source="appcaps"\} 0`)
			tookRe := regexp.MustCompile(`tcpdoctor_source_duration_seconds\{[^}]*netns="host"[^}]*source="appcaps"\} (\S+)`)
			var stepMax float64
			last, sawDown := -1, false
			var lastAt time.Time
			var gap time.Duration
			for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
				resp, err := client.Get("http://" + addr + "/metrics")
				if err != nil {
					t.Fatalf("scrape: %v", err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
				}
				if limitRe.Match(b) {
					t.Errorf("a limit for the hostile nginx:\n%s", limitRe.Find(b))
				}
				sawDown = sawDown || downRe.Match(b)
				if m := tookRe.FindSubmatch(b); m != nil {
					v, _ := strconv.ParseFloat(string(m[1]), 64)
					stepMax = max(stepMax, v)
				}
				m := collectionsRe.FindSubmatch(b)
				if m == nil {
					continue // no collection yet
				}
				if n, _ := strconv.Atoi(string(m[1])); n != last {
					if last >= 0 {
						gap = max(gap, time.Since(lastAt))
					}
					last, lastAt = n, time.Now()
				}
			}
			// Every interval (1 s) a collection, give or take its own time
			// (longer on a loaded machine), and the application-limit step
			// within its 2 s deadline.
			if last < 3 || gap > 5*time.Second {
				t.Errorf("%d collections in 8 s at a 1 s interval, at most %v apart", last, gap)
			}
			if stepMax > 2.5 {
				t.Errorf("the application-limit step took %.2fs, past its 2 s deadline", stepMax)
			}
			if !sawDown {
				t.Error("appcaps never reported down for the host")
			}
			if mx, err := os.ReadFile(filepath.Join(cg, "memory.max_usage_in_bytes")); err == nil {
				t.Logf("serve's cgroup: at most %s bytes; %d collections, at most %v apart; the application-limit step at most %.3fs", strings.TrimSpace(string(mx)), last, gap, stepMax)
			}
		})
	}
}

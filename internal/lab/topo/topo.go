// SPDX-License-Identifier: Apache-2.0

// Package topo builds the lab's network: three namespaces (client, router,
// server) joined by veth pairs on 198.18.0.0/15, using iproute2 commands.
//
//	client eth0 198.18.1.2/24 ── to-client 198.18.1.1 [router] 198.18.2.1 to-server ── eth0 198.18.2.2/24 server
package topo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every lab namespace.
const Prefix = "tdlab-"

// Interface names, the same in every run (each namespace has its own).
const (
	HostIf         = "eth0"      // the client's and the server's interface
	RouterClientIf = "to-client" // router side of the client link
	RouterServerIf = "to-server" // router side of the server link
)

// Config describes a topology. The zero value is a valid minimal one.
type Config struct {
	// Run names the run; empty picks a random 6-hex-digit id.
	Run string
	// ClientAddrs and ServerAddrs are how many addresses each host gets
	// (0 means 1); extra ones follow the first: 198.18.1.3, .4 ...
	ClientAddrs, ServerAddrs int
	// CC, if set, is the congestion control put on the hosts' routes
	// ("cubic", "reno", "bbr"); a child namespace cannot change its default.
	CC string
	// Runner runs commands; nil runs them with os/exec.
	Runner Runner
	// StateDir holds the run's owner file; empty means DefaultStateDir.
	StateDir string
}

// DefaultStateDir holds one owner file per run (pid and start time of the
// process that built it), so that Clean spares the runs still alive.
const DefaultStateDir = "/run/tcpdoctor-lab"

// Runner runs one command and returns its stdout.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Topo is a built topology.
type Topo struct {
	Run                    string
	Client, Router, Server string // namespace names
	ClientAddrs            []netip.Addr
	ServerAddrs            []netip.Addr
	ClientGW, ServerGW     netip.Addr // the router's address on each side
	CC                     string

	run      Runner
	stateDir string
	closed   bool
}

// Addresses of the fixed layout.
var (
	clientNet = netip.MustParsePrefix("198.18.1.0/24")
	serverNet = netip.MustParsePrefix("198.18.2.0/24")
)

// ExecRunner runs commands with os/exec and reports failures with the
// command line and its stderr.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	// iproute2 commands take milliseconds; a minute means something hangs.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out.Bytes(), nil
}

// NewRunID returns a short random run id.
func NewRunID() (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("topo: run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func validRun(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func hostAddrs(p netip.Prefix, n int) ([]netip.Addr, error) {
	if n == 0 {
		n = 1
	}
	if n < 0 || n > 200 {
		return nil, fmt.Errorf("topo: %d addresses asked, want 1-200", n)
	}
	a := p.Addr().Next().Next() // .2
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out, nil
}

// Build creates the namespaces, links, addresses and routes. On error it
// removes whatever it created.
func Build(cfg Config) (*Topo, error) {
	ctx := context.Background()
	run := cfg.Run
	if run == "" {
		var err error
		if run, err = NewRunID(); err != nil {
			return nil, err
		}
	}
	if !validRun(run) {
		return nil, fmt.Errorf("topo: bad run id %q: want 1-20 of [a-z0-9-]", run)
	}
	switch cfg.CC {
	case "", "cubic", "reno", "bbr":
	default:
		return nil, fmt.Errorf("topo: congestion control %q: want cubic, reno or bbr", cfg.CC)
	}
	ca, err := hostAddrs(clientNet, cfg.ClientAddrs)
	if err != nil {
		return nil, err
	}
	sa, err := hostAddrs(serverNet, cfg.ServerAddrs)
	if err != nil {
		return nil, err
	}
	r := cfg.Runner
	if r == nil {
		r = ExecRunner
	}
	t := &Topo{
		Run:         run,
		Client:      Prefix + run + "-client",
		Router:      Prefix + run + "-router",
		Server:      Prefix + run + "-server",
		ClientAddrs: ca,
		ServerAddrs: sa,
		ClientGW:    clientNet.Addr().Next(),
		ServerGW:    serverNet.Addr().Next(),
		CC:          cfg.CC,
		run:         r,
		stateDir:    cfg.StateDir,
	}
	if t.stateDir == "" {
		t.stateDir = DefaultStateDir
	}
	if err := t.build(ctx); err != nil {
		if cerr := t.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return t, nil
}

func (t *Topo) build(ctx context.Context) error {
	// The owner file comes first, so that a concurrent Clean never sees
	// this run's namespaces without it.
	if err := writeOwner(t.stateDir, t.Run); err != nil {
		return err
	}
	for _, ns := range []string{t.Client, t.Router, t.Server} {
		if _, err := t.run(ctx, "ip", "netns", "add", ns); err != nil {
			return fmt.Errorf("topo: %w", err)
		}
	}
	cmds := [][]string{
		{"-n", t.Router, "link", "add", RouterClientIf, "type", "veth", "peer", "name", HostIf, "netns", t.Client},
		{"-n", t.Router, "link", "add", RouterServerIf, "type", "veth", "peer", "name", HostIf, "netns", t.Server},
		{"-n", t.Router, "addr", "add", pfx(t.ClientGW, 24), "dev", RouterClientIf},
		{"-n", t.Router, "addr", "add", pfx(t.ServerGW, 24), "dev", RouterServerIf},
	}
	for _, a := range t.ClientAddrs {
		cmds = append(cmds, []string{"-n", t.Client, "addr", "add", pfx(a, 24), "dev", HostIf})
	}
	for _, a := range t.ServerAddrs {
		cmds = append(cmds, []string{"-n", t.Server, "addr", "add", pfx(a, 24), "dev", HostIf})
	}
	for _, ns := range []string{t.Client, t.Router, t.Server} {
		cmds = append(cmds, []string{"-n", ns, "link", "set", "lo", "up"})
	}
	cmds = append(cmds,
		[]string{"-n", t.Client, "link", "set", HostIf, "up"},
		[]string{"-n", t.Server, "link", "set", HostIf, "up"},
		[]string{"-n", t.Router, "link", "set", RouterClientIf, "up"},
		[]string{"-n", t.Router, "link", "set", RouterServerIf, "up"},
		withCC([]string{"-n", t.Client, "route", "add", "default", "via", t.ClientGW.String(), "dev", HostIf}, t.CC),
		withCC([]string{"-n", t.Server, "route", "add", "default", "via", t.ServerGW.String(), "dev", HostIf}, t.CC),
	)
	for _, c := range cmds {
		if _, err := t.run(ctx, "ip", c...); err != nil {
			return fmt.Errorf("topo: %w", err)
		}
	}
	// The router forwards; rp_filter off so that packets re-entering from
	// the delay line's TUN device are not dropped as martians.
	return t.Do(t.Router, func() error {
		for _, kv := range [][2]string{
			{"net/ipv4/ip_forward", "1"},
			{"net/ipv4/conf/all/rp_filter", "0"},
			{"net/ipv4/conf/default/rp_filter", "0"},
			{"net/ipv4/conf/" + RouterClientIf + "/rp_filter", "0"},
			{"net/ipv4/conf/" + RouterServerIf + "/rp_filter", "0"},
		} {
			if err := WriteSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

func pfx(a netip.Addr, bits int) string { return netip.PrefixFrom(a, bits).String() }

func withCC(args []string, cc string) []string {
	if cc == "" {
		return args
	}
	return append(args, "congctl", cc)
}

// WriteSysctl writes /proc/sys/<key> in the network namespace of the
// calling thread (use it inside Do).
func WriteSysctl(key, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0); err != nil {
		return fmt.Errorf("topo: sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// Cmd runs "ip -n NS args..." (or any iproute2 tool with -n) with the
// topology's runner.
func (t *Topo) Cmd(ctx context.Context, tool, ns string, args ...string) ([]byte, error) {
	out, err := t.run(ctx, tool, append([]string{"-n", ns}, args...)...)
	if err != nil {
		return out, fmt.Errorf("topo: %w", err)
	}
	return out, nil
}

// Close deletes the run's namespaces and its owner file. It is
// idempotent. Processes still inside a namespace keep it alive after the
// name is gone.
func (t *Topo) Close() error {
	if t == nil || t.closed {
		return nil
	}
	t.closed = true
	err := deleteNamespaces(context.Background(), t.run, Prefix+t.Run+"-")
	if rerr := os.Remove(ownerPath(t.stateDir, t.Run)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("topo: %w", rerr))
	}
	return err
}

// Clean deletes the namespaces whose names start with prefix (which must
// start with Prefix), leftovers of killed runs: it spares every run whose
// owner file in DefaultStateDir names a live process. A nil runner uses
// ExecRunner.
func Clean(ctx context.Context, r Runner, prefix string) error {
	if !strings.HasPrefix(prefix, Prefix) {
		return fmt.Errorf("topo: clean: prefix %q does not start with %q", prefix, Prefix)
	}
	names, err := List(prefix)
	if err != nil {
		return err
	}
	runs := map[string]bool{}
	for _, n := range names {
		if run, ok := runOf(n); ok {
			runs[run] = true
		}
	}
	var errs []error
	for run := range runs {
		if ownerAlive(DefaultStateDir, run) {
			continue
		}
		if err := deleteNamespaces(ctx, r, Prefix+run+"-"); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(ownerPath(DefaultStateDir, run)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("topo: %w", err))
		}
	}
	return errors.Join(errs...)
}

// runOf returns the run of a namespace named Prefix+run+"-"+role.
func runOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", false
	}
	return rest[:i], true
}

func deleteNamespaces(ctx context.Context, r Runner, prefix string) error {
	if r == nil {
		r = ExecRunner
	}
	names, err := List(prefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if _, err := r(ctx, "ip", "netns", "delete", n); err != nil {
			errs = append(errs, fmt.Errorf("topo: %w", err))
		}
	}
	return errors.Join(errs...)
}

func ownerPath(dir, run string) string { return filepath.Join(dir, Prefix+run+".owner") }

// writeOwner records this process (pid and start time) as the run's owner.
func writeOwner(dir, run string) error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("topo: state dir: %w", err)
	}
	if err := os.WriteFile(ownerPath(dir, run), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o644); err != nil {
		return fmt.Errorf("topo: owner file: %w", err)
	}
	return nil
}

// ownerAlive tells whether the run's owner file names a running process
// (same pid and start time).
func ownerAlive(dir, run string) bool {
	b, err := os.ReadFile(ownerPath(dir, run))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil || pid <= 0 {
		return false
	}
	now, err := procStart(pid)
	return err == nil && now == start
}

// procStart returns a process's start time (field 22 of /proc/PID/stat).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("topo: %w", err)
	}
	return parseStart(string(b))
}

func parseStart(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("topo: proc stat: no command")
	}
	f := strings.Fields(stat[i+1:]) // from field 3 (state) on
	if len(f) < 20 {
		return 0, errors.New("topo: proc stat: short")
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("topo: proc stat start time: %w", err)
	}
	return v, nil
}

// List returns the named namespaces (in /run/netns) starting with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topo: list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Do runs fn on a fresh OS thread that has joined the named network
// namespace. Sockets fn creates stay in that namespace and may be used from
// any goroutine afterwards. The thread is discarded when fn returns.
func (t *Topo) Do(ns string, fn func() error) error { return Do(ns, fn) }

// Do runs fn on a fresh OS thread inside the namespace /run/netns/<ns>.
func Do(ns string, fn func() error) error {
	if ns == "" || strings.ContainsRune(ns, '/') {
		return fmt.Errorf("topo: bad namespace name %q", ns)
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine, so its
		// changed namespace cannot leak to other goroutines.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("topo: open netns %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("topo: setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

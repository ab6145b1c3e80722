// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestNamedErrors(t *testing.T) {
	dir := t.TempDir()
	f := Finder{ProcRoot: "/proc", RunDir: dir}
	if _, err := f.Named("x"); !errors.Is(err, ErrNotFound) || err.Error() != `netns: "x": no such namespace (none under `+dir+`)` {
		t.Errorf("empty dir: %v", err)
	}
	// A plain file is what a stale /run/netns entry looks like.
	if err := os.WriteFile(filepath.Join(dir, "stale"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Named("stale"); err == nil || !strings.Contains(err.Error(), "is not a namespace") {
		t.Errorf("stale: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := f.Named(bad); err == nil || !strings.HasPrefix(err.Error(), "netns: invalid name") {
			t.Errorf("Named(%q): %v", bad, err)
		}
	}
	f.RunDir = filepath.Join(dir, "missing")
	if ns, err := f.named(); err != nil || ns != nil {
		t.Errorf("missing run dir: %v, %v; want none, no error", ns, err)
	}
}

func TestCurrent(t *testing.T) {
	ns, err := Default().Current()
	if err != nil {
		t.Fatal(err)
	}
	want, err := nsInode("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Inode != want || ns.Name == "" || ns.Path == "" {
		t.Errorf("Current = %+v, want inode %d", ns, want)
	}
	host, err := nsInode("/proc/1/ns/net")
	if err != nil {
		host = want // pid 1 unreadable: our own is called host
	}
	if host == want && ns.Name != "host" {
		// Unless an `ip netns` name points at it.
		if _, err := os.Stat("/run/netns/" + ns.Name); err != nil {
			t.Errorf("Current in pid 1's namespace named %q, want host", ns.Name)
		}
	}
	if got, err := nsInode(ns.Path); err != nil || got != ns.Inode {
		t.Errorf("Path %s has inode %d (%v), want %d", ns.Path, got, err, ns.Inode)
	}
}

// TestOfPid: a process's namespace is named as Current names it (our own
// process: the same), and a pid that is gone is an error naming it.
func TestOfPid(t *testing.T) {
	cur, err := Default().Current()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := Default().OfPid(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ns.Name != cur.Name || ns.Inode != cur.Inode {
		t.Errorf("OfPid(self) = %+v, Current = %+v", ns, cur)
	}
	if got, err := nsInode(ns.Path); err != nil || got != ns.Inode {
		t.Errorf("Path %s has inode %d (%v), want %d", ns.Path, got, err, ns.Inode)
	}
	if _, err := (Finder{ProcRoot: t.TempDir(), RunDir: t.TempDir()}).OfPid(42); err == nil || !strings.Contains(err.Error(), "of pid 42") {
		t.Errorf("OfPid of a missing pid: %v", err)
	}
}

func TestDoBadPath(t *testing.T) {
	err := Do(NS{Name: "gone", Path: filepath.Join(t.TempDir(), "gone")}, func() error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "netns: enter gone: open ") {
		t.Errorf("err = %v", err)
	}
	cur, err := Default().Current()
	if err != nil {
		t.Fatal(err)
	}
	cur.Inode++
	if err := Do(cur, func() error { return nil }); err == nil || !strings.Contains(err.Error(), "is now namespace") {
		t.Errorf("wrong inode: %v", err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addNamed creates `ip netns` namespaces removed at cleanup.
func addNamed(t *testing.T, names ...string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("root but no ip(8): cannot test")
	}
	for _, n := range names {
		exec.Command("ip", "netns", "del", n).Run() // left over from a killed run
		run(t, "ip", "netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
	}
}

// unnamedChild starts `unshare -n sleep 30` and waits until it has left our
// namespace; it is killed at cleanup.
func unnamedChild(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("unshare", "-n", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	self, err := nsInode("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ino, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err == nil && ino != self {
			return pid, ino
		}
	}
	t.Fatal("unshare child did not enter a new namespace within 5s")
	return 0, 0
}

func names(all []NS) []string {
	var s []string
	for _, ns := range all {
		s = append(s, ns.Name)
	}
	return s
}

func TestAllAndDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	prefix := "tdns-" + strconv.Itoa(os.Getpid())
	a, b := prefix+"-a", prefix+"-b"
	addNamed(t, a, b)
	childPid, childIno := unnamedChild(t)

	f := Default()
	cur, err := f.Current()
	if err != nil {
		t.Fatal(err)
	}
	all, err := f.All()
	// Some sandboxes refuse even root a few processes (pid 1 here); any
	// other error is a failure.
	if err != nil && !errors.Is(err, os.ErrPermission) {
		t.Fatalf("All: %v", err)
	}
	if len(all) == 0 || all[0].Inode != cur.Inode || all[0].Name != cur.Name {
		t.Fatalf("All()[0] = %+v, want current %+v; all %v", all, cur, names(all))
	}
	byName := make(map[string]NS)
	inodes := make(map[uint64]bool)
	for _, ns := range all {
		if inodes[ns.Inode] {
			t.Errorf("inode %d listed twice: %v", ns.Inode, names(all))
		}
		inodes[ns.Inode] = true
		byName[ns.Name] = ns
	}
	for _, n := range []string{a, b} {
		ns, ok := byName[n]
		if !ok {
			t.Fatalf("All() lacks %s: %v", n, names(all))
		}
		if ino, _ := nsInode("/run/netns/" + n); ns.Inode != ino || ns.Path != "/run/netns/"+n {
			t.Errorf("%s = %+v, want inode %d", n, ns, ino)
		}
		if ns.Inode == cur.Inode {
			t.Errorf("%s has the current namespace's inode", n)
		}
	}
	child := byName["pid:"+strconv.Itoa(childPid)]
	if child.Inode != childIno || child.Path != "/proc/"+strconv.Itoa(childPid)+"/ns/net" {
		t.Errorf("child namespace = %+v, want inode %d; all %v", child, childIno, names(all))
	}
	if i, j := indexOf(all, a), indexOf(all, b); i > j {
		t.Errorf("not sorted by name: %v", names(all))
	}

	nsA, err := f.Named(a)
	if err != nil || nsA != byName[a] {
		t.Fatalf("Named(%s) = %+v, %v", a, nsA, err)
	}
	if _, err := f.Named(prefix + "-missing"); err == nil || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Errorf("Named(missing) error does not list %s and %s: %v", a, b, err)
	}

	// Do enters the namespace, on this and on the unnamed one.
	for _, ns := range []NS{nsA, child} {
		var inside uint64
		if err := Do(ns, func() error {
			var err error
			inside, err = nsInode("/proc/thread-self/ns/net")
			return err
		}); err != nil {
			t.Fatalf("Do(%s): %v", ns.Name, err)
		}
		if inside != ns.Inode || inside == cur.Inode {
			t.Errorf("Do(%s) ran in namespace %d, want %d (current %d)", ns.Name, inside, ns.Inode, cur.Inode)
		}
	}
	if after, _ := nsInode("/proc/thread-self/ns/net"); after != cur.Inode {
		t.Errorf("caller's thread moved to %d", after)
	}
	sentinel := errors.New("sentinel")
	if err := Do(nsA, func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do did not return fn's error: %v", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want boom", p)
			}
		}()
		Do(nsA, func() error { panic("boom") })
	}()
}

func indexOf(all []NS, name string) int {
	for i, ns := range all {
		if ns.Name == name {
			return i
		}
	}
	return -1
}

// TestDoSocket checks a listener made inside Do lives in that namespace and
// works from other goroutines afterwards.
func TestDoSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	name := "tdns-" + strconv.Itoa(os.Getpid()) + "-sock"
	addNamed(t, name)
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	ns, err := Default().Named(name)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listen inside: %v", err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ino := listenerInode(t, ln)

	inside := run(t, "ip", "netns", "exec", name, "ss", "-lnteH")
	if !strings.Contains(inside, "127.0.0.1:"+port) || !strings.Contains(inside, "ino:"+ino) {
		t.Errorf("ss in %s does not show listener 127.0.0.1:%s ino %s:\n%s", name, port, ino, inside)
	}
	if host := run(t, "ss", "-lnteH"); strings.Contains(host, "ino:"+ino+" ") {
		t.Errorf("listener ino %s visible in the host namespace:\n%s", ino, host)
	}

	// Dial from inside the namespace, accept on an ordinary goroutine.
	var c net.Conn
	if err := Do(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial inside: %v", err)
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(2 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept outside Do: %v", err)
	}
	s.Close()
}

func listenerInode(t *testing.T, ln net.Listener) string {
	t.Helper()
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return strconv.FormatUint(st.Ino, 10)
}

// TestDoNotPermitted re-runs itself without CAP_SYS_ADMIN and checks the
// message.
func TestDoNotPermitted(t *testing.T) {
	if path := os.Getenv("NETNS_TEST_ENTER"); path != "" {
		err := Do(NS{Name: "victim", Path: path}, func() error { return nil })
		os.Stdout.WriteString("RESULT " + errString(err) + "\n")
		os.Stdout.WriteString("IS " + strconv.FormatBool(errors.Is(err, ErrPermission) && errors.Is(err, unix.EPERM)) + "\n")
		// Our own namespace needs no setns, so no CAP_SYS_ADMIN.
		own, err := Default().Current()
		if err == nil {
			err = Do(own, func() error { return nil })
		}
		os.Stdout.WriteString("OWN " + errString(err) + "\n")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to drop CAP_SYS_ADMIN")
	}
	name := "tdns-" + strconv.Itoa(os.Getpid()) + "-perm"
	addNamed(t, name)
	cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-sys_admin",
		os.Args[0], "-test.run=^TestDoNotPermitted$", "-test.v")
	cmd.Env = append(os.Environ(), "NETNS_TEST_ENTER=/run/netns/"+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "RESULT netns: enter victim: operation not permitted (needs CAP_SYS_ADMIN)"
	if !strings.Contains(string(out), want+"\n") {
		t.Errorf("child output lacks %q:\n%s", want, out)
	}
	if !strings.Contains(string(out), "IS true\n") {
		t.Errorf("the error does not wrap ErrPermission and EPERM:\n%s", out)
	}
	if !strings.Contains(string(out), "OWN <nil>\n") {
		t.Errorf("entering our own namespace without CAP_SYS_ADMIN failed:\n%s", out)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestByProcessMany: with enough processes to split the stats across
// CPUs, every pid lands under its own namespace's inode, lowest first,
// and one without a namespace link (vanished) is skipped.
func TestByProcessMany(t *testing.T) {
	root := t.TempDir()
	const n = 1500
	want := map[uint64][]int{}
	for pid := 1; pid <= n; pid++ {
		dir := filepath.Join(root, strconv.Itoa(pid), "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if pid == 700 {
			continue // no ns/net: vanished, skipped
		}
		// Three "namespaces": pids share the inode of a hard link.
		first := filepath.Join(root, strconv.Itoa(pid%3+1), "ns", "net")
		link := filepath.Join(dir, "net")
		if pid <= 3 {
			if err := os.WriteFile(link, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Link(first, link); err != nil {
			t.Fatal(err)
		}
		ino, err := nsInode(link)
		if err != nil {
			t.Fatal(err)
		}
		if len(want[ino]) < pidsPerNS {
			want[ino] = append(want[ino], pid)
		}
	}
	got, _, err := Finder{ProcRoot: root}.byProcess()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("byProcess = %v, want %v", got, want)
	}
}

func TestParseNSLink(t *testing.T) {
	for in, want := range map[string]uint64{"net:[4026531840]": 4026531840, "net:[1]": 1} {
		if got, ok := parseNSLink([]byte(in)); !ok || got != want {
			t.Errorf("parseNSLink(%q) = %d, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "net:[]", "mnt:[4026531840]", "net:[12", "net:[x]", "net:[-1]"} {
		if got, ok := parseNSLink([]byte(in)); ok {
			t.Errorf("parseNSLink(%q) = %d, want refused", in, got)
		}
	}
}

// TestLinkInode: the link's text and stat agree on a real process.
func TestLinkInode(t *testing.T) {
	path := "/proc/self/ns/net"
	want, err := nsInode(path)
	if err != nil {
		t.Skip(err)
	}
	if got, err := linkInode(path); err != nil || got != want {
		t.Errorf("linkInode = %d, %v; stat says %d", got, err, want)
	}
	if _, err := linkInode("/proc/0/ns/net"); err == nil {
		t.Error("no process 0: no error")
	}
}

func FuzzParseNSLink(f *testing.F) {
	f.Add([]byte("net:[4026531840]"))
	f.Add([]byte("net:["))
	f.Fuzz(func(t *testing.T, b []byte) {
		ino, ok := parseNSLink(b)
		if !ok {
			return
		}
		digits, _ := strings.CutSuffix(strings.TrimPrefix(string(b), "net:["), "]")
		if strings.TrimLeft(digits, "0") != strings.TrimLeft(strconv.FormatUint(ino, 10), "0") {
			t.Fatalf("%q read as %d", b, ino)
		}
	})
}

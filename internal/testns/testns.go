// Package testns gives root tests a named network namespace of their own,
// removed when the test ends (also when it fails).
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

// NeedRoot skips the test unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, sock_diag of other namespaces)")
	}
}

// New creates namespace "tdt-<prefix>-<random>" with lo up and returns it.
func New(t testing.TB, prefix string) netns.NS {
	t.Helper()
	NeedRoot(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "tdt-" + prefix + "-" + hex.EncodeToString(b[:])
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	ns, err := netns.Default().Named(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// DialAccept connects to ln and accepts the connection: both ends.
func DialAccept(ln net.Listener) (client, server net.Conn, err error) {
	c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

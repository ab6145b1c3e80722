// SPDX-License-Identifier: Apache-2.0

// Package procnet reads the /proc/net counters (netstat, snmp, sockstat)
// and the /proc/sys settings tcpdoctor reasons about.
package procnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// FS reads /proc/net files and sysctls. Production: NetDir
// "/proc/thread-self/net" (NOT /proc/self/net, which follows the main
// thread's netns, while collection runs on a thread that did setns),
// SysDir "/proc/sys". Tests point both at testdata.
type FS struct{ NetDir, SysDir string }

// Default returns the FS for the calling thread's network namespace.
// /proc/sys/net shows the netns of the thread that opens each file, so
// both directories follow a thread that did setns. Measured: a goroutine
// that exits locked after setns may have run on the main thread, which
// the Go runtime parks instead of ending, so /proc/self/net then shows
// that other netns for the rest of the process's life.
func Default() FS {
	return FS{NetDir: "/proc/thread-self/net", SysDir: "/proc/sys"}
}

// sysctlNames is copied by SysctlNames; never modified.
var sysctlNames = [...]string{
	"net.core.somaxconn",
	"net.core.netdev_max_backlog",
	"net.core.rmem_default",
	"net.core.rmem_max",
	"net.core.wmem_default",
	"net.core.wmem_max",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
	"net.ipv4.tcp_mem",
	"net.ipv4.tcp_moderate_rcvbuf",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_tw_reuse",
	"net.ipv4.tcp_tw_reuse_delay",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_max_tw_buckets",
	"net.ipv4.tcp_max_syn_backlog",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.tcp_congestion_control",
	"net.ipv4.tcp_available_congestion_control",
	"net.ipv4.tcp_slow_start_after_idle",
	"net.ipv4.tcp_notsent_lowat",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_syn_retries",
	"net.ipv4.tcp_synack_retries",
	"net.ipv4.tcp_retries2",
	"net.ipv4.tcp_abort_on_overflow",
	// Removed in Linux 4.12; kept so a snapshot of an older kernel shows it.
	"net.ipv4.tcp_tw_recycle",
	"net.ipv4.tcp_timestamps",
	"net.ipv4.tcp_window_scaling",
	"net.ipv4.tcp_sack",
	"net.ipv4.tcp_ecn",
	"net.ipv4.ip_forward",
	"fs.file-max",
	"fs.file-nr",
	"fs.nr_open",
}

// SysctlNames returns the dotted sysctl names tcpdoctor reads (a fresh
// slice each call).
func SysctlNames() []string {
	return append([]string(nil), sysctlNames[:]...)
}

// Fill reads netstat, snmp, sockstat, sockstat6 and the sysctls into
// s.Counters, s.Sockstat and s.Sysctls (allocated when nil). Each failed
// source is recorded with s.AddError and collection goes on; a source that
// fails part way keeps what parsed cleanly (whole groups or lines). A
// missing sockstat6 (IPv6 disabled) or a sysctl this kernel lacks is
// absence, not failure. One snapshot.SourceStat is appended per source.
func (p FS) Fill(s *snapshot.Snapshot) {
	if s.Counters == nil {
		s.Counters = make(map[string]int64, 512)
	}
	if s.Sockstat == nil {
		s.Sockstat = make(map[string]int64, 32)
	}
	if s.Sysctls == nil {
		s.Sysctls = make(map[string]string, len(sysctlNames))
	}
	for _, st := range []source.Step{
		{Name: snapshot.SourceNetstat, Run: func() error { return p.counterFile("netstat", s.Counters) }},
		{Name: snapshot.SourceSNMP, Run: func() error { return p.counterFile("snmp", s.Counters) }},
		{Name: snapshot.SourceSockstat, Run: func() error { return p.Sockstats(s.Sockstat) }},
		{Name: snapshot.SourceSysctl, Run: func() error { return p.sysctls(s.Sysctls) }},
	} {
		_ = source.Run(nil, st, s) // recorded in s
	}
}

// Sockstats reads sockstat and sockstat6 into into; a missing sockstat6
// (IPv6 disabled) is absence, not failure.
func (p FS) Sockstats(into map[string]int64) error {
	err := p.sockstatFile("sockstat", into)
	err6 := p.sockstatFile("sockstat6", into)
	if errors.Is(err6, fs.ErrNotExist) {
		err6 = nil
	}
	return errors.Join(err, err6)
}

// counterFile opens and parses a netstat-format file under NetDir.
func (p FS) counterFile(name string, into map[string]int64) error {
	b, err := readFile(filepath.Join(p.NetDir, name), maxLine)
	if err != nil {
		return fmt.Errorf("procnet: %w", err)
	}
	return parseNetstat(bytes.NewReader(b), name, into)
}

// sockstatFile opens and parses a sockstat-format file under NetDir.
func (p FS) sockstatFile(name string, into map[string]int64) error {
	b, err := readFile(filepath.Join(p.NetDir, name), maxLine)
	if err != nil {
		return fmt.Errorf("procnet: %w", err)
	}
	return parseSockstat(bytes.NewReader(b), name, into)
}

// readFile reads a small /proc file of at most limit bytes with plain
// syscalls: os.File's poller registration cost a fifth of Fill's time.
// Errors are *fs.PathError like os's, so fs.ErrNotExist matches.
func readFile(path string, limit int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("longer than %d bytes", limit)}
		}
	}
}

// sysctls reads every name in the list; absent ones are skipped.
func (p FS) sysctls(into map[string]string) error {
	var errs []error
	for _, name := range sysctlNames {
		v, err := ReadSysctl(p.SysDir, name)
		switch {
		case err == nil:
			into[name] = v
		case errors.Is(err, fs.ErrNotExist):
			// The kernel lacks it (or its subsystem is off): absent.
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// maxSysctlSize bounds one sysctl read; ip_local_reserved_ports is the
// longest we read and a fully fragmented list stays far below this.
const maxSysctlSize = 1 << 20

// ReadSysctl returns the value of the dotted sysctl name under sysDir
// (normally /proc/sys) with whitespace folded to single spaces. A setting
// the kernel lacks gives an error matching fs.ErrNotExist.
func ReadSysctl(sysDir, name string) (string, error) {
	rel, err := sysctlPath(name)
	if err != nil {
		return "", err
	}
	b, err := readFile(filepath.Join(sysDir, rel), maxSysctlSize)
	if err != nil {
		return "", fmt.Errorf("procnet: sysctl %s: %w", name, err)
	}
	return strings.Join(strings.Fields(string(b)), " "), nil
}

// sysctlPath maps "net.core.somaxconn" to "net/core/somaxconn", refusing
// names that would leave the sysctl tree.
func sysctlPath(name string) (string, error) {
	parts := strings.Split(name, ".")
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "/\x00") {
			return "", fmt.Errorf("procnet: sysctl %q: bad name", name)
		}
	}
	return filepath.Join(parts...), nil
}

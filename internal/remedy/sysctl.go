// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// LimitOf says how the sysctl name limits: diag.LimitRaise for a
// capacity limit a fix must only raise (buffer maxima, queue lengths,
// TIME_WAIT buckets, file counts), diag.LimitWiden for the ephemeral port
// range, "" for a switch or a setting a fix may lower.
func LimitOf(name string) string {
	switch name {
	case "net.core.rmem_max", "net.core.wmem_max", "net.core.somaxconn", "net.core.netdev_max_backlog",
		"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_mem",
		"net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_max_tw_buckets", "fs.file-max", "fs.nr_open":
		return diag.LimitRaise
	case "net.ipv4.ip_local_port_range":
		return diag.LimitWiden
	}
	return ""
}

// Sysctl is the setting name = values for the host whose snapshot is
// host (nil: a host not in the snapshot, such as a peer's). A capacity
// limit never goes below the host's value: each value is raised to at
// least the host's (a range widened to cover it), and Host records what
// the host had. A limit whose host value is unknown keeps no Host, so
// its command is guarded (Render).
func Sysctl(host *snapshot.Snapshot, name string, values ...int64) diag.Sysctl {
	s := diag.Sysctl{Name: name, Limit: LimitOf(name)}
	if host != nil && s.Limit != "" {
		if have, ok := host.SysctlInts(name); ok && len(have) == len(values) {
			values = append([]int64(nil), values...)
			for i, h := range have {
				if s.Limit == diag.LimitWiden && i == 0 {
					values[i] = min(values[i], h)
				} else {
					values[i] = max(values[i], h)
				}
			}
			s.Host = join(have)
		}
	}
	s.Value = join(values)
	return s
}

// Known is Sysctl for a single-valued name whose host value have was
// read already (ok), or is unknown.
func Known(name string, n, have int64, ok bool) diag.Sysctl {
	s := diag.Sysctl{Name: name, Limit: LimitOf(name)}
	if ok && s.Limit != "" {
		n = max(n, have)
		s.Host = strconv.FormatInt(have, 10)
	}
	s.Value = strconv.FormatInt(n, 10)
	return s
}

// Setting is a sysctl whose value is not numbers (a list of ports): it is
// no capacity limit.
func Setting(name, value string) diag.Sysctl { return diag.Sysctl{Name: name, Value: value} }

func join(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(s, " ")
}

// SetSysctls makes f set ss: f.Command (any probe to run first) becomes
// f.Pre, and Command is rendered from the data, persisted in
// /etc/sysctl.d/<persist> when persist is set.
func SetSysctls(f diag.Fix, persist string, ss ...diag.Sysctl) diag.Fix {
	f.Pre, f.Sysctls, f.Persist = f.Command, ss, persist
	f.Command = Render(f.Pre, ss, persist)
	return f
}

// Render is the shell command that sets ss after pre (when set) and,
// with persist, writes them to /etc/sysctl.d/<persist>. The settings
// with nothing to guard go in one sysctl -w; a limit whose host value is
// unknown (diag.Sysctl.Guarded) is set only where lower, each value
// compared with the host's own:
//
//	if [ "$(sysctl -n net.core.rmem_max)" -lt 8192 ]; then sysctl -w net.core.rmem_max=8192; fi
//	set -- $(sysctl -n net.ipv4.tcp_rmem) && sysctl -w net.ipv4.tcp_rmem="$(($1>4096?$1:4096)) ..."
func Render(pre string, ss []diag.Sysctl, persist string) string {
	var parts, plain []string
	if pre != "" {
		parts = append(parts, pre)
	}
	for _, s := range ss {
		if !s.Guarded() {
			plain = append(plain, s.Name+"="+shellValue(s.Value))
		}
	}
	if len(plain) > 0 {
		parts = append(parts, "sysctl -w "+strings.Join(plain, " "))
	}
	for _, s := range ss {
		if s.Guarded() {
			parts = append(parts, guard(s))
		}
	}
	cmd := strings.Join(parts, "; ")
	if persist == "" || len(ss) == 0 {
		return cmd
	}
	for i, s := range ss {
		to := ">"
		if i > 0 {
			to = ">>"
		}
		line := "'" + s.Name + " = " + s.Value + "'"
		if s.Guarded() {
			line = `"` + s.Name + ` = $(sysctl -n ` + s.Name + `)"`
		}
		cmd += " && echo " + line + " " + to + " /etc/sysctl.d/" + persist
	}
	return cmd
}

// guard is the command that sets s only where the host's value is lower.
func guard(s diag.Sysctl) string {
	v := strings.Fields(s.Value)
	if len(v) == 1 {
		// if, not &&: a value already high enough leaves the exit status
		// 0, so a persist chain after it (&& echo ...) still runs.
		return fmt.Sprintf(`if [ "$(sysctl -n %s)" -lt %s ]; then sysctl -w %s=%s; fi`, s.Name, v[0], s.Name, v[0])
	}
	e := make([]string, len(v))
	for i, x := range v {
		op := ">"
		if s.Limit == diag.LimitWiden && i == 0 {
			op = "<"
		}
		e[i] = fmt.Sprintf("$((${%d}%s%s?${%d}:%s))", i+1, op, x, i+1, x)
	}
	return fmt.Sprintf(`set -- $(sysctl -n %s) && sysctl -w %s="%s"`, s.Name, s.Name, strings.Join(e, " "))
}

// shellValue quotes v for a shell when it holds a space.
func shellValue(v string) string {
	if strings.ContainsAny(v, " \t") {
		return "'" + v + "'"
	}
	return v
}

// AtLeast says, for people, what a guarded sysctl sets: "net.core.rmem_max
// at least 8192".
func AtLeast(s diag.Sysctl) string {
	if s.Guarded() {
		return s.Name + " at least " + strings.ReplaceAll(s.Value, " ", "/")
	}
	return s.Name + " = " + s.Value
}

// FromCheck is the setting a failed bdp check asks for on the host s:
// net.core.rmem_max to Needed, tcp_rmem's maximum (Setting
// "net.ipv4.tcp_rmem[2]") to Needed with its other values kept, a switch
// to Needed; false for a check that is not a sysctl to set.
func FromCheck(s *snapshot.Snapshot, c bdp.Check) (diag.Sysctl, bool) {
	if name, ok := strings.CutSuffix(c.Setting, "[2]"); ok {
		v, ok := s.SysctlInts(name)
		if !ok || len(v) != 3 {
			return diag.Sysctl{}, false
		}
		return Sysctl(s, name, v[0], v[1], c.Needed), true
	}
	if strings.Contains(c.Setting, "[") {
		return diag.Sysctl{}, false
	}
	return Sysctl(s, c.Setting, c.Needed), true
}

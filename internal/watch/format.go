// SPDX-License-Identifier: Apache-2.0

package watch

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// jsonLine is one line of `watch --json` (docs/watch.md); fields are only
// ever added.
type jsonLine struct {
	Time       string `json:"time"`
	Kind       string `json:"kind"`
	Netns      string `json:"netns"`
	NetnsInode uint64 `json:"netns_inode"`
	// Pid and Command are null when the kernel ran the event for no
	// process (interrupt or timer context).
	Pid     *int    `json:"pid"`
	Command *string `json:"command"`
	Local   string  `json:"local"`
	Remote  string  `json:"remote"`
	Reason  string  `json:"reason,omitempty"`
	Count   uint64  `json:"count"`
}

const timeJSON = "2006-01-02T15:04:05.000000Z07:00"

// subjectOf is l's namespace (named by nameOf) and process.
func subjectOf(l *Line, nameOf func(uint64) (string, bool)) output.Subject {
	var name string
	named := false
	if nameOf != nil {
		name, named = nameOf(l.Netns)
	}
	s := output.ProcessSubject(output.NetnsLabel(l.Netns, name, named), l.Pid, l.Command)
	s.Workload = l.Workload
	return s
}

func appendJSON(b []byte, l *Line, nameOf func(uint64) (string, bool)) []byte {
	sub := subjectOf(l, nameOf)
	j := jsonLine{Time: l.Time.Format(timeJSON), Kind: l.Kind, Netns: sub.Netns, NetnsInode: l.Netns,
		Local: endpoint(l.Local), Remote: endpoint(l.Remote), Reason: l.Reason, Count: l.Count}
	if sub.HasPid {
		pid, cmd := sub.Pid, sub.Command
		j.Pid, j.Command = &pid, &cmd
	}
	out, err := json.Marshal(j)
	if err != nil { // only strings and numbers: cannot fail
		return append(b, "{}\n"...)
	}
	b = append(b, out[:len(out)-1]...) // the workload's members go before '}'
	return append(sub.AppendWorkloadJSON(b), '}', '\n')
}

// appendText writes one line for a person, its names escaped (textsafe):
//
//	09:31:02.123 reset-sent       host   curl/1234   198.18.0.1:5555 > 198.18.0.2:80  TCP_ABORT_ON_LINGER
//
// and, when the process's (else the namespace's) workload is known and
// the namespace's name does not say it all, the workload last:
// "  container api", "  pod shop/web-1 container api", "  unit nginx.service".
func appendText(b []byte, l *Line, nameOf func(uint64) (string, bool)) []byte {
	b = l.Time.AppendFormat(b, "15:04:05.000")
	b = append(b, ' ')
	kind := textsafe.String(l.Kind)
	b = pad(append(b, kind...), len(kind), 17)
	sub := subjectOf(l, nameOf)
	ns := sub.NetnsText()
	b = pad(append(b, ns...), len(ns), 10)
	proc := processCell(&sub, 17)
	b = pad(append(b, proc...), utf8.RuneCountInString(proc), 18)
	ends := endpoint(l.Local) + " > " + endpoint(l.Remote)
	b = pad(append(b, ends...), len(ends), 46)
	b = append(b, textsafe.String(l.Reason)...)
	if l.Kind == BurstKind {
		b = append(b, strconv.FormatUint(l.Count, 10)...)
		b = append(b, " retransmits"...)
	}
	if w := sub.WorkloadBesideNetns(); w != "" {
		b = append(append(b, "  "...), w...)
	}
	return append(b, '\n')
}

// processCell is the process as "command/pid", its command cut (never
// inside an escape) so the cell is at most width characters: a long or
// escaped name does not push the columns after it.
func processCell(sub *output.Subject, width int) string {
	if !sub.HasPid {
		return "-"
	}
	pid := "/" + strconv.Itoa(sub.Pid)
	cmd := "?"
	if sub.HasCommand {
		cmd = textsafe.Fit(sub.Command, max(width-len(pid), 4))
	}
	return cmd + pid
}

// pad adds spaces after a field of n bytes up to width, and at least one.
func pad(b []byte, n, width int) []byte {
	b = append(b, ' ')
	for ; n < width-1; n++ {
		b = append(b, ' ')
	}
	return b
}

// endpoint prints an address and port; "*" stands for an address or a
// port the kernel did not give (a burst's local address, the port of a
// socket aborted by close()).
func endpoint(ap netip.AddrPort) string {
	addr, port := "*", "*"
	if a := ap.Addr(); a.IsValid() && !a.IsUnspecified() {
		addr = a.String()
		if a.Is6() {
			addr = "[" + addr + "]"
		}
	}
	if ap.Port() != 0 {
		port = strconv.Itoa(int(ap.Port()))
	}
	return addr + ":" + port
}

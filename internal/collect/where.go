// SPDX-License-Identifier: Apache-2.0

package collect

import "github.com/tcpdoctor/tcpdoctor/internal/netns"

// Where is which live network namespaces a collection reads: every one
// (All), the one ip netns names (Netns), a process's (Pid), else our own.
type Where struct {
	All   bool
	Netns string
	Pid   int
	// ProcOnly finds them from /proc alone, without the kernel's walk of
	// every process (netns.Finder.Tasks): eBPF off.
	ProcOnly bool
}

// Find resolves w with f. With All, a partial list (processes that may
// not be inspected) comes with the error.
func (w Where) Find(f netns.Finder) ([]netns.NS, error) {
	if w.ProcOnly {
		f.Tasks = nil
	}
	var ns netns.NS
	var err error
	switch {
	case w.All:
		return f.All()
	case w.Netns != "":
		ns, err = f.Named(w.Netns)
	case w.Pid > 0:
		ns, err = f.OfPid(w.Pid)
	default:
		ns, err = f.Current()
	}
	if err != nil {
		return nil, err
	}
	return []netns.NS{ns}, nil
}

// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
)

// bpfOpts is --bpf, shared by the commands that collect live, and the
// opt-in --pidfd-buflock.
type bpfOpts struct {
	mode  string
	pidfd bool
}

func (o *bpfOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.mode, "bpf", "auto", "eBPF sources: connection events (connects, failed connects by cause, who closed first) and the buffer lock bits of every socket (iter/tcp); off also reads owners and namespaces from /proc instead of the kernel's walks: "+
		"auto (use what loads, else say once why not), on (fail with exit 3 if one cannot load), off")
	fs.BoolVar(&o.pidfd, "pidfd-buflock", false, "where the eBPF iterator cannot read the buffer lock bits, read SO_BUF_LOCK of owned sockets that look pinned "+
		"through a copy of the owner's fd (pidfd_getfd, needs CAP_SYS_PTRACE); not read-only: it re-stamps the socket's cgroup v1 net_cls/net_prio values, so it is refused where those are mounted")
}

func (o *bpfOpts) validate(src *sourceOpts) error {
	m, err := bpfload.ParseMode(o.mode)
	if err != nil {
		return usageErr("%v", err)
	}
	src.noBPF = m == bpfload.ModeOff
	if m == bpfload.ModeOn && src.from != "" {
		return usageErr("--bpf on applies to live collection; --from replays the events recorded in the file")
	}
	if o.pidfd && src.from != "" {
		return usageErr("--pidfd-buflock applies to live collection; --from replays the lock bits recorded in the file")
	}
	return nil
}

// extras loads what --bpf chose of the extras a command needs: the one
// way every command that collects live gets its eBPF sources.
func (o *bpfOpts) extras(e *Env, src *sourceOpts, need bpfload.Need) (*bpfload.Extras, error) {
	x, err := bpfload.Open(bpfload.Config{Mode: bpfload.Mode(o.mode), Need: need, Replay: src.from != "",
		PidFD: o.pidfd, ProcRoot: e.ProcRoot, Loaders: e.BPF, Note: e.progress})
	if err != nil {
		return nil, collectErr(err)
	}
	return x, nil
}

// allExtras is extras for check, record and serve, which use every one.
func (o *bpfOpts) allExtras(e *Env, src *sourceOpts) (*bpfload.Extras, error) {
	return o.extras(e, src, bpfload.Need{Events: true, EventsBeside: true, Locks: true, Files: true})
}

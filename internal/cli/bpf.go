package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
)

// bpfOpts is --bpf, shared by the commands that collect live.
type bpfOpts struct{ mode string }

func (o *bpfOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.mode, "bpf", "auto", "eBPF connection events (connects, failed port allocations, who closed first): "+
		"auto (use where it loads, else say once why not), on (fail with exit 3 if it cannot load), off")
}

func (o *bpfOpts) validate(src *sourceOpts) error {
	switch o.mode {
	case "auto", "off":
	case "on":
		if src.from != "" {
			return usageErr("--bpf on applies to live collection; --from replays the events recorded in the file")
		}
	default:
		return usageErr("--bpf must be auto, on or off, not %q", o.mode)
	}
	return nil
}

// open loads the event source as the mode says. It returns a nil reader
// when off, replaying --from, or (auto) not loadable, and a close func
// that is always safe to call.
func (o *bpfOpts) open(e *Env, src *sourceOpts) (collect.EventReader, func(), error) {
	none := func() {}
	if o.mode == "off" || src.from != "" {
		return nil, none, nil
	}
	if e.OpenEvents == nil {
		if o.mode == "on" {
			return nil, none, collectErr(errors.New("--bpf on: this build has no eBPF loader"))
		}
		return nil, none, nil
	}
	s, err := e.OpenEvents()
	if err != nil {
		if o.mode == "on" {
			return nil, none, collectErr(err)
		}
		e.progress("note: eBPF connection events off: %v (--bpf off silences this)", err)
		return nil, none, nil
	}
	return s, func() {
		if err := s.Close(); err != nil {
			e.progress("note: %v", err)
		}
	}, nil
}

// openEvents is the production loader for Env.OpenEvents.
func openEvents() (*bpfsource.Source, error) { return bpfsource.Open(bpfsource.Options{}) }

// printEvents lists, under the sockets table, the connections each process
// opened and closed between the two samples as the eBPF source counted
// them: most of them never show in a socket dump. Nothing is printed
// without the source.
func printEvents(w io.Writer, ss []series, flt *socketFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, sr := range ss {
		_, cur := sr.Window()
		if cur.Events == nil {
			continue
		}
		secs := cur.Events.Interval().Seconds()
		for _, f := range cur.Events.Flows {
			rp, lp := int(f.Remote.Port()), int(f.LocalPort)
			if (flt.pid != 0 && f.Pid != flt.pid) || (flt.rport != 0 && rp != flt.rport) ||
				(flt.port != 0 && rp != flt.port && lp != flt.port) || (flt.lport != 0 && lp != flt.lport) {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nconnection events between the samples (eBPF, over %s):\n", cur.Events.Interval().Round(time.Millisecond))
				fmt.Fprintln(tw, "NETNS\tPID\tCOMMAND\tREMOTE\tCONNECTS\tPER SEC\tNO PORT\tCLOSED FIRST\tPEER CLOSED\tMEAN LIFE")
				header = true
			}
			life := "-"
			if f.Ended > 0 {
				life = (f.Lifetime / time.Duration(f.Ended)).Round(time.Microsecond).String()
			}
			rate := "-"
			if secs > 0 {
				rate = fmt.Sprintf("%.1f", float64(f.Opens)/secs)
			}
			remote := f.Remote.String()
			if f.Accepted() {
				remote = fmt.Sprintf("accepted on :%d", f.LocalPort)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", sr.Netns, f.Pid, f.Command, remote,
				f.Opens, rate, f.FailedPorts, f.ActiveCloses, f.PeerCloses, life)
		}
	}
	_ = tw.Flush()
}

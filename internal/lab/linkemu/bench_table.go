// SPDX-License-Identifier: Apache-2.0

// The bench's results for people: tables and the lab's targets.

package linkemu

import (
	"fmt"
	"io"
	"time"
)

// WriteTable prints the results as two aligned tables.
func (r *BenchResult) WriteTable(w io.Writer) {
	if p := r.Ping; p.Received > 0 {
		fmt.Fprintf(w, "delay accuracy (UDP ping-pong, measured RTT - configured RTT %v; line hold = release - due, per packet):\n", p.RTT)
		fmt.Fprintf(w, "  %-8s %-8s %-9s %-9s %-9s %-9s   %-15s %-15s\n", "sent", "replies", "min", "p50", "p99", "max", "line hold p50", "line hold p99")
		fmt.Fprintf(w, "  %-8d %-8d %-9s %-9s %-9s %-9s   %-15s %-15s\n", p.Sent, p.Received, ms(p.Min), ms(p.P50), ms(p.P99), ms(p.Max),
			"<"+ms(p.Link.HoldErrP50), "<"+ms(p.Link.HoldErrP99))
	}
	if r.CPUPressure >= 0 {
		fmt.Fprintf(w, "machine: some task waited for a CPU %.0f %% of the run (PSI cpu some)", 100*r.CPUPressure)
		if r.Steal >= 0 {
			fmt.Fprintf(w, "; the hypervisor took %.0f %% of the CPUs (steal)", 100*r.Steal)
		}
		fmt.Fprintln(w)
	}
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, "throughput (one autotuned TCP flow, client to server):\n")
		fmt.Fprintf(w, "  %-10s %-7s %-10s %-9s %-14s %-14s %-10s %-15s %-15s\n", "link", "rtt", "received", "seconds", "goodput", "after 1s", "line cpu", "line hold p50", "line hold p99")
		for _, f := range r.Flows {
			fmt.Fprintf(w, "  %-10s %-7v %-10s %-9.2f %-14s %-14s %-10s %-15s %-15s\n",
				fmt.Sprintf("%g Mbit", f.Rate/1e6), f.RTT, fmt.Sprintf("%.1f MB", float64(f.Bytes)/1e6),
				f.Elapsed.Seconds(), fmt.Sprintf("%.1f Mbit/s", f.Mbps), fmt.Sprintf("%.1f Mbit/s", f.SteadyMbps), fmt.Sprintf("%.1f %%", f.CPUPct),
				"<"+ms(f.Link.HoldErrP50), "<"+ms(f.Link.HoldErrP99))
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }

// Target is one of the targets for the default setup (20 ms RTT,
// 1 Gbit/s and 100 Mbit/s links).
type Target struct {
	Name, Value string
	OK          bool
}

// Targets checks the results against the targets; it makes sense only for
// the default setup. The throughput targets are steady-state rates: they
// are checked on the rate after the first second (slow start and the loss
// recovery that ends it take most of that second at 20 ms).
func (r *BenchResult) Targets() []Target {
	var out []Target
	if p := r.Ping; p.Received > 0 {
		out = append(out,
			Target{"delay p50 within 0.2ms", ms(p.P50), abs(p.P50) <= 200*time.Microsecond},
			Target{"delay p99 within 0.5ms", ms(p.P99), abs(p.P99) <= 500*time.Microsecond})
	}
	for _, f := range r.Flows {
		switch f.Rate {
		case 1e9:
			out = append(out,
				Target{"1 Gbit/s flow at least 900 Mbit/s after 1s", fmt.Sprintf("%.1f", f.SteadyMbps), f.SteadyMbps >= 900},
				Target{"emulator at most 25 % of a core", fmt.Sprintf("%.1f %%", f.CPUPct), f.CPUPct <= 25})
		case 100e6:
			out = append(out, Target{"100 Mbit/s flow at least 94 Mbit/s after 1s", fmt.Sprintf("%.1f", f.SteadyMbps), f.SteadyMbps >= 94})
		}
	}
	return out
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// capacityLimits are the sysctls no fix may lower: "raise" each value
// only rises, "widen" a range's low end only falls and its high end only
// rises. Written out here, apart from remedy's own list, so a limit
// remedy forgets still fails.
var capacityLimits = map[string]string{
	"net.core.rmem_max":            "raise",
	"net.core.wmem_max":            "raise",
	"net.core.somaxconn":           "raise",
	"net.core.netdev_max_backlog":  "raise",
	"net.ipv4.tcp_rmem":            "raise",
	"net.ipv4.tcp_wmem":            "raise",
	"net.ipv4.tcp_mem":             "raise",
	"net.ipv4.tcp_max_syn_backlog": "raise",
	"net.ipv4.tcp_max_tw_buckets":  "raise",
	"fs.file-max":                  "raise",
	"fs.nr_open":                   "raise",
	"net.ipv4.ip_local_port_range": "widen",
}

// TestNoFixLowersALimit runs every rule over every fixture (each rule's
// and every other's, with no --bandwidth and with two) and reads every
// fix's command as a shell would: a `sysctl -w` of a capacity limit that
// is not behind a guard (`if [ ... -lt N ]; then`, or a value worked out
// from the current one) must not set any value below the fixture host's,
// and one whose host value the fixture lacks must be guarded. A fix made
// at the other end (Peer) is held to the fixture host's values too: that
// host may be this one.
func TestNoFixLowersALimit(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*", "*.jsonl"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	checked := 0
	for _, path := range fixtures {
		snaps := readSnaps(t, path)
		var prev *snapshot.Snapshot
		if len(snaps) > 1 {
			prev = snaps[0]
		}
		cur := snaps[len(snaps)-1]
		for _, r := range All() {
			for _, bw := range []float64{0, 100e6, 10e9} {
				in := keptInput(r, prev, cur)
				in.Options.Bandwidth = bw
				var res diag.Result
				diag.Run([]diag.Rule{r}, in, &res)
				for _, f := range res.Findings {
					for _, fx := range f.Fixes {
						for _, msg := range lowered(fx.Command, cur.Sysctls) {
							t.Errorf("%s, %s, --bandwidth %g: fix %q: %s", path, r.ID, bw, fx.Command, msg)
						}
						if strings.Contains(fx.Command, "sysctl -w") {
							checked++
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no fix with a sysctl -w was checked")
	}
}

// lowered reads cmd's sysctl -w settings and says which of them may lower
// a capacity limit of host.
func lowered(cmd string, host map[string]string) []string {
	var why []string
	parts := shellParts(cmd)
	for i, p := range parts {
		// `if [ ... -lt N ]; then sysctl -w ...; fi`: the command after then.
		thenPart := len(p.words) > 0 && p.words[0] == "then"
		if thenPart {
			p.words = p.words[1:]
		}
		if len(p.words) < 2 || p.words[0] != "sysctl" || p.words[1] != "-w" {
			continue
		}
		prev := []string{}
		if i > 0 {
			prev = parts[i-1].words
		}
		guarded := i > 0 && parts[i-1].and && len(prev) > 0 && prev[0] == "[" ||
			thenPart && len(prev) > 1 && prev[0] == "if" && prev[1] == "["
		for _, a := range p.words[2:] {
			name, value, ok := strings.Cut(a, "=")
			if !ok {
				break
			}
			kind := capacityLimits[name]
			if kind == "" || guarded || strings.Contains(value, "$((") {
				continue
			}
			have, ok := host[name]
			if !ok {
				why = append(why, name+" is set unguarded with the host's value unknown")
				continue
			}
			hv, nv := strings.Fields(have), strings.Fields(value)
			if len(hv) != len(nv) {
				why = append(why, name+"="+value+" has not the shape of the host's "+have)
				continue
			}
			for j := range nv {
				h, err1 := strconv.ParseInt(hv[j], 10, 64)
				n, err2 := strconv.ParseInt(nv[j], 10, 64)
				if err1 != nil || err2 != nil {
					why = append(why, name+"="+value+": not numbers")
					break
				}
				low := n < h
				if kind == "widen" && j == 0 {
					low = n > h
				}
				if low {
					why = append(why, name+"="+value+" lowers the host's "+have)
					break
				}
			}
		}
	}
	return why
}

// shellPart is one command of a list: its words, unquoted, and whether
// "&&" follows it.
type shellPart struct {
	words []string
	and   bool
}

// shellParts splits a command list at ";" and "&&" outside quotes.
func shellParts(cmd string) []shellPart {
	var parts []shellPart
	var cur shellPart
	var w strings.Builder
	in, quote := false, byte(0)
	word := func() {
		if in {
			cur.words = append(cur.words, w.String())
		}
		w.Reset()
		in = false
	}
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			word()
		case c == ';' || c == '&' && i+1 < len(cmd) && cmd[i+1] == '&':
			word()
			if c == '&' {
				cur.and = true
				i++
			}
			parts = append(parts, cur)
			cur = shellPart{}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	word()
	return append(parts, cur)
}

// Package rules holds every diagnosis rule, one file each. All returns
// them in a fixed order, sorted by id; the registry test checks that each
// has a unique id, a doc page and firing and quiet fixtures.
package rules

import (
	"sort"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// All returns every rule, sorted by id.
func All() []diag.Rule {
	rs := []diag.Rule{
		// One line per rule; keep this list explicit.
		closeWaitLeak(),
		fdExhaustion(),
		listenOverflow(),
		portExhaustion(),
		timeWaitChurn(),
		sndbufLimited(),
		rwndLimited(),
		slowReader(),
		retransmissions(),
		synQueueOverflow(),
		bufferLimits(),
		connectionBottleneck(),
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	return rs
}

// ByID returns the rule with the given id.
func ByID(id string) (diag.Rule, bool) {
	for _, r := range All() {
		if r.ID == id {
			return r, true
		}
	}
	return diag.Rule{}, false
}

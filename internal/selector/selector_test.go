// SPDX-License-Identifier: Apache-2.0

package selector

import (
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestMatch(t *testing.T) {
	app := &snapshot.Workload{ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &snapshot.Workload{ID: "fedcba9876543210", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	docker := &snapshot.Workload{ID: "0123456789abffff", Container: "web"}
	unit := &snapshot.Workload{Unit: "nginx.service"}
	for _, c := range []struct {
		pod, ctr string
		w        *snapshot.Workload
		want     bool
	}{
		{"", "", nil, true},
		{"web-1", "", nil, false},
		{"web-1", "", app, true},
		{"shop/web-1", "", app, true},
		{"other/web-1", "", app, false},
		{"web-1", "", sandbox, true},
		{"web-1", "api", sandbox, false},
		{"", "api", app, true},
		{"", "0123456789ab", app, true},
		{"", "0123456789a", app, false}, // under 12: a name, not an id
		{"", "fedcba987654", sandbox, false},
		{"", "web", docker, true},
		{"web", "", docker, false},
		{"", "nginx.service", unit, false},
	} {
		o := Selector{Pod: c.pod, Container: c.ctr}
		if err := o.Check(); err != nil {
			t.Fatal(err)
		}
		if got := o.Match(c.w); got != c.want {
			t.Errorf("--pod %q --container %q on %+v: %v, want %v", c.pod, c.ctr, c.w, got, c.want)
		}
	}
	o := Selector{Pod: "web-1"}
	other := *app
	other.PodNamespace = "other"
	if err := o.Find("here", []snapshot.Workload{*app, other}); err == nil || !strings.Contains(err.Error(), "names 2 pods (other/web-1, shop/web-1)") {
		t.Errorf("ambiguous pod: %v", err)
	}
}

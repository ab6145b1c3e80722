// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"reflect"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestDumpMakesWas: asked for them, the dump makes the window's records
// of its sockets, the ones WasOf makes afterwards; not asked, none.
func TestDumpMakesWas(t *testing.T) {
	ns := testns.New(t, "was")
	testns.Connections(t, ns, 5)
	c := &Collector{Opts: Options{Was: true}, Now: time.Now}
	s := c.Collect([]netns.NS{ns})[0]
	if len(s.Sockets) != 11 || !reflect.DeepEqual(s.Was, snapshot.WasOf(s.Sockets)) {
		t.Errorf("%d sockets; records made in the dump %+v, after it %+v", len(s.Sockets), s.Was, snapshot.WasOf(s.Sockets))
	}
	c.Opts.Was = false
	if s := c.Collect([]netns.NS{ns})[0]; s.Was != nil {
		t.Errorf("records made unasked: %d", len(s.Was))
	}
}

// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteTextNothingMatched: a trace that saw no connection says which
// filter matched none, or, with no filter, that none was seen (not "no
// connection matched all connections").
func TestWriteTextNothingMatched(t *testing.T) {
	for filter, want := range map[string]string{
		"port 1":       "no connection matched port 1\n",
		allConnections: "no established connection was seen\n",
	} {
		var b bytes.Buffer
		if err := WriteText(&b, &Trace{Header: Header{Filter: filter}}, nil, 20); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); !strings.HasSuffix(got, want) {
			t.Errorf("filter %q: %q, want it to end %q", filter, got, want)
		}
	}
}

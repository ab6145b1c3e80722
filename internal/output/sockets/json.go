// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
)

// appendJSON appends r as one JSON object, byte for byte what
// encoding/json makes of view (json_test.go checks that on random
// sockets): the names, order, omitempty and escaping of its tags.
// Written by hand because reflection per field was most of the time of
// `sockets --json`.
func appendJSON(b []byte, r *Row) []byte {
	b = append(b, '{')
	b = r.Subject.AppendJSON(b)
	b = append(b, ',')
	b = r.Socket.AppendJSONFields(b)
	if l := r.Limited; l != nil {
		b = append(b, `,"limited":{"window_ms":`...)
		b = output.AppendJSONFloat(b, float64(l.Window)/float64(time.Millisecond))
		b = append(b, `,"busy":`...)
		b = output.AppendJSONFloat(b, l.Busy)
		b = append(b, `,"sndbuf":`...)
		b = output.AppendJSONFloat(b, l.Sndbuf)
		b = append(b, `,"rwnd":`...)
		b = output.AppendJSONFloat(b, l.Rwnd)
		b = append(b, `,"congestion":`...)
		b = output.AppendJSONFloat(b, l.Congestion)
		b = append(b, '}')
	}
	return append(b, '}')
}

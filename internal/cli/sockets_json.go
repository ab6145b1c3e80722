package cli

import (
	"math"
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// socketRow is one row of `sockets`, in whatever form it reached the
// printer: the socket is borrowed (reused by the dump), nothing is copied.
type socketRow struct {
	netns string
	sk    *snapshot.Socket
	// command is the first owner's; hasCommand false when it is unknown.
	command    string
	hasCommand bool
	shares     *sharesView
}

// appendSocketJSON appends r as one JSON object, byte for byte what
// encoding/json makes of socketView (sockets_json_test.go checks that on
// random sockets): the names, order, omitempty and escaping of its tags.
// Written by hand because reflection per field was most of the time of
// `sockets --json`.
func appendSocketJSON(b []byte, r *socketRow) []byte {
	sk := r.sk
	b = append(b, `{"netns":`...)
	b = snapshot.AppendJSONString(b, r.netns)
	b = append(b, `,"pid":`...)
	if len(sk.Pids) > 0 {
		b = strconv.AppendInt(b, int64(sk.Pids[0]), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"command":`...)
	if r.hasCommand {
		b = snapshot.AppendJSONString(b, r.command)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, ',')
	b = sk.AppendJSONFields(b)
	if s := r.shares; s != nil {
		b = append(b, `,"limited":{"window_ms":`...)
		b = appendJSONFloat(b, s.WindowMS)
		b = append(b, `,"busy":`...)
		b = appendJSONFloat(b, s.Busy)
		b = append(b, `,"sndbuf":`...)
		b = appendJSONFloat(b, s.Sndbuf)
		b = append(b, `,"rwnd":`...)
		b = appendJSONFloat(b, s.Rwnd)
		b = append(b, `,"congestion":`...)
		b = appendJSONFloat(b, s.Congestion)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONFloat formats f as encoding/json does (shortest repr, 'e'
// form outside [1e-6, 1e21)). NaN and infinities, which encoding/json
// refuses, never come out of snapshot.Frac; they are written as 0.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

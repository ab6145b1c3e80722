// SPDX-License-Identifier: Apache-2.0

package snapshot

import "unique"

// CC is a congestion control algorithm's name ("cubic", "bbr"), interned:
// 8 bytes in a socket instead of a string's 16, and one copy of each name
// however many sockets use it. The zero CC is no name (none was sent).
type CC struct{ h unique.Handle[string] }

// CCOf returns name as a CC; "" is the zero CC.
func CCOf(name string) CC {
	if name == "" {
		return CC{}
	}
	return CC{unique.Make(name)}
}

// String returns the name; "" for the zero CC.
func (c CC) String() string {
	if c.IsZero() {
		return ""
	}
	return c.h.Value()
}

// IsZero reports whether c has no name (for omitzero).
func (c CC) IsZero() bool { return c == CC{} }

// MarshalText writes the name.
func (c CC) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a name.
func (c *CC) UnmarshalText(b []byte) error {
	*c = CCOf(string(b))
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"encoding/json"
	"strconv"
)

// Flags is a byte of bits a socket may lack: its shutdown bits or its
// buffer lock bits, each read only by some sources. Two bytes held in the
// socket instead of a pointer to one. The zero Flags is unknown; encoded
// as the number, and left out of JSON (omitzero) when unknown.
type Flags struct {
	bits  uint8
	known bool
}

// FlagsOf returns known bits v.
func FlagsOf(v uint8) Flags { return Flags{bits: v, known: true} }

// Get returns the bits and whether they are known.
func (f Flags) Get() (uint8, bool) { return f.bits, f.known }

// Known reports whether the bits were read.
func (f Flags) Known() bool { return f.known }

// Bits returns the bits; 0 when unknown.
func (f Flags) Bits() uint8 { return f.bits }

// IsZero reports whether the bits are unknown (for omitzero).
func (f Flags) IsZero() bool { return !f.known }

// String is the number, or "unknown".
func (f Flags) String() string {
	if !f.known {
		return "unknown"
	}
	return strconv.Itoa(int(f.bits))
}

// MarshalJSON writes the number, or null when unknown.
func (f Flags) MarshalJSON() ([]byte, error) {
	if !f.known {
		return []byte("null"), nil
	}
	return strconv.AppendUint(nil, uint64(f.bits), 10), nil
}

// UnmarshalJSON reads a number from 0 to 255, or null for unknown.
func (f *Flags) UnmarshalJSON(b []byte) error {
	var v *uint8
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Flags{}
	if v != nil {
		*f = FlagsOf(*v)
	}
	return nil
}

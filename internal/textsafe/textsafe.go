// SPDX-License-Identifier: Apache-2.0

// Package textsafe makes strings from outside tcpdoctor (process names,
// namespace names, snapshot files, errors quoting them) safe to print on
// a terminal: every text printer passes them through String.
package textsafe

import (
	"strconv"
	"unicode/utf8"
)

// String returns s with everything a terminal could act on escaped the
// way strconv.Quote does, without the quotes: C0 controls (newline and
// tab included, as they forge lines and columns) as \n, \t, \x1b; DEL as
// \x7f; C1 controls and other unprintable runes as \u009b; bytes that
// are not UTF-8 as \xff. Printable text, é and 中 included, and the
// backslash are kept, so a plain string comes back as it is (without
// allocating) and String(String(s)) == String(s).
func String(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !keep(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case keep(r, n):
			b = append(b, s[i:i+n]...)
		case r == utf8.RuneError && n == 1:
			b = append(b, `\x`...)
			b = append(b, hex[s[i]>>4], hex[s[i]&0xf])
		default:
			// strconv's escapes: \n, \t, \x1b, \x7f, \u009b, \U000e0001.
			q := strconv.AppendQuoteRune(nil, r)
			b = append(b, q[1:len(q)-1]...)
		}
		i += n
	}
	return string(b)
}

const hex = "0123456789abcdef"

// keep reports whether rune r, n bytes long in the input, prints as it is.
func keep(r rune, n int) bool {
	if r == utf8.RuneError && n == 1 {
		return false
	}
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return strconv.IsPrint(r)
}

// Fit is String(s) cut to at most width characters, ending in "…" when
// cut. It cuts between the runes of s, never inside an escape, so what is
// left is still safe and still reads back as a prefix of s.
func Fit(s string, width int) string {
	out := String(s)
	if utf8.RuneCountInString(out) <= width {
		return out
	}
	if width < 1 {
		return ""
	}
	b := make([]byte, 0, width+3)
	used := 0
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		piece := String(s[i : i+n])
		w := utf8.RuneCountInString(piece)
		if used+w > width-1 {
			break
		}
		b = append(b, piece...)
		used += w
		i += n
	}
	return string(append(b, "…"...))
}

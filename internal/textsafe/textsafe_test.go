// SPDX-License-Identifier: Apache-2.0

package textsafe

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile is a process name a local user can set (prctl PR_SET_NAME):
// it retitles the window, clears the screen and starts a forged line.
const hostile = "\x1b]0;PWN\x07\x1b[2J\nX"

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nginx", "nginx"},
		{"", ""},
		{`C:\dir "q"`, `C:\dir "q"`},
		{"café 中文", "café 中文"},
		{hostile, `\x1b]0;PWN\a\x1b[2J\nX`},
		{"a\tb\r\x00", `a\tb\r\x00`},
		{"del\x7f", `del\x7f`},
		{"csi\u009b2J", `csi\u009b2J`},
		{"bad\xff\xc2", `bad\xff\xc2`},
		{"raw c1 \x9b", `raw c1 \x9b`},
		{"rtl\u202eevil", `rtl\u202eevil`},
		{"line\u2028sep", `line\u2028sep`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStringPlainDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("curl/8.5 café ", 4)
	if n := testing.AllocsPerRun(100, func() { _ = String(s) }); n != 0 {
		t.Errorf("%v allocations for a plain string, want 0", n)
	}
}

// unsafeAt says what in out a terminal could act on, or "".
func unsafeAt(out string) string {
	if !utf8.ValidString(out) {
		return "invalid UTF-8"
	}
	for _, r := range out {
		switch {
		case r < 0x20, r == 0x7f:
			return "C0 control or DEL " + strconv.QuoteRune(r)
		case r >= 0x80 && r <= 0x9f:
			return "C1 control " + strconv.QuoteRune(r)
		}
	}
	return ""
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"nginx", "", hostile, "café 中文", "\xff\xfe", "\u009b[31m", "tab\there", `back\slash`, "\U000e0001", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := String(in)
		if why := unsafeAt(out); why != "" {
			t.Fatalf("String(%q) = %q holds %s", in, out, why)
		}
		if String(out) != out {
			t.Fatalf("String not idempotent on %q: %q, then %q", in, out, String(out))
		}
		plain := utf8.ValidString(in)
		for _, r := range in {
			plain = plain && (r >= 0x20 && r < 0x7f || r >= 0xa0 && strconv.IsPrint(r))
		}
		if plain && out != in {
			t.Fatalf("printable %q changed to %q", in, out)
		}
		// Without quotes or backslashes of its own, the output reads back
		// as a Go string literal holding exactly the input.
		if !strings.ContainsAny(in, `"\`) {
			back, err := strconv.Unquote(`"` + out + `"`)
			if err != nil || back != in {
				t.Fatalf("String(%q) = %q reads back as %q (%v)", in, out, back, err)
			}
		}
	})
}

func TestFit(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  string
	}{
		{"nginx", 10, "nginx"},
		{"a-very-long-process-name", 10, "a-very-lo…"},
		{"ab\x1bcdef", 6, `ab…`}, // \x1b would need 4: never half an escape
		{"ab\x1bcdef", 7, `ab\x1b…`},
		{"中文进程名字很长", 5, "中文进程…"},
		{"x", 0, ""},
	} {
		got := Fit(c.in, c.width)
		if got != c.want {
			t.Errorf("Fit(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
		if utf8.RuneCountInString(got) > max(c.width, 0) {
			t.Errorf("Fit(%q, %d) = %q: wider than %d", c.in, c.width, got, c.width)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"hash/fnv"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// maxLabelLen bounds every label value, in bytes.
const maxLabelLen = 128

// labelValue is v made safe as a label value: valid UTF-8, with control
// characters, bidi overrides and bytes that are not UTF-8 escaped
// (textsafe.String: ESC as \x1b, U+202E as \u202e, 0xff as \xff), and at
// most maxLabelLen bytes: a longer value is cut and ends in "..." and a
// hash of the whole, so two long values stay two series. It is applied
// in viewBuilder.add, which every family of the view goes through; a
// safe value comes back as it is, without allocating, so
// labelValue(labelValue(v)) == labelValue(v).
func labelValue(v string) string {
	// Escaping at most quadruples a byte (0xff is \xff): a prefix of
	// 4*maxLabelLen bytes is all a cut value can show.
	raw, cut := v, false
	if len(v) > 4*maxLabelLen {
		v, cut = v[:4*maxLabelLen], true
	}
	v = textsafe.String(v)
	if !cut && len(v) <= maxLabelLen {
		return v
	}
	h := fnv.New32a()
	h.Write([]byte(raw))
	suffix := fmt.Sprintf("...%08x", h.Sum32())
	n := maxLabelLen - len(suffix)
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n] + suffix
}

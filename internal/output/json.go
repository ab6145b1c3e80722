// SPDX-License-Identifier: Apache-2.0

package output

import (
	"encoding/json"
	"io"
)

// WriteJSON prints v as one JSON document indented by two spaces and
// ended by a newline: the encoding of every --json that prints one
// document (check, history, bdp, version).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

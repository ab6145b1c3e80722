// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
)

// jsonOpt is --json: one flag, one help text, on every command that
// prints JSON (docs/json.md). A command that prints one document writes
// it with write; one that streams (sockets, trace, watch) passes on to
// its printer that JSON was asked for.
type jsonOpt struct{ on bool }

func (j *jsonOpt) register(fs *pflag.FlagSet) {
	fs.BoolVar(&j.on, "json", false, "print JSON instead of text (each command's format: docs/json.md)")
}

// write prints v as the command's JSON document.
func (j *jsonOpt) write(w io.Writer, v any) error { return output.WriteJSON(w, v) }

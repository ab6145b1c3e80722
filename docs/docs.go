// SPDX-License-Identifier: Apache-2.0

// Package docs embeds the rule pages so `tcpdoctor explain` works from a
// lone binary.
package docs

import (
	"embed"
	"io/fs"
)

//go:embed rules/*.md
var rules embed.FS

// Rule returns the page docs/rules/<id>.md.
func Rule(id string) ([]byte, error) {
	return fs.ReadFile(rules, "rules/"+id+".md")
}

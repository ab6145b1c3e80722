// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputBytes pins every byte the printers write, stdout and stderr,
// for every rule fixture (and the hostile one: two namespaces, names and
// a zone to escape): the sockets table and JSON stream, check's text (info
// included) and JSON, and trace's table and JSON lines. The digests are in
// testdata/outputs.sha256 (-update rewrites it); a printer moved or
// rewritten must leave them as they are.
func TestOutputBytes(t *testing.T) {
	fixtures, err := filepath.Glob("../rules/testdata/*/*.jsonl")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	type input struct{ name, path string }
	var in []input
	for _, f := range fixtures {
		in = append(in, input{strings.TrimPrefix(f, "../rules/testdata/"), f})
	}
	in = append(in, input{"hostile", hostileFixture(t)})
	var b strings.Builder
	digest := func(name string, args ...string) {
		code, out, errOut := run(t, args...)
		fmt.Fprintf(&b, "%x %d %s %s\n", sha256.Sum256([]byte(out+"\x00"+errOut)), code, strings.Join(args[:len(args)-2], " "), name)
	}
	for _, f := range in {
		for _, cmd := range [][]string{{"sockets"}, {"sockets", "--json"}, {"check", "-v"}, {"check", "--json"}} {
			digest(f.name, append(cmd, "--from", f.path)...)
		}
	}
	tf := traceFile(t)
	digest("trace", "trace", "--bandwidth", "100mbit", "--from", tf)
	digest("trace", "trace", "--json", "--from", tf)
	golden(t, "outputs.sha256", b.String())
}

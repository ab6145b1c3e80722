// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSPDXHeaders: every source file of the repository says its licence in
// an SPDX line near its top: Apache-2.0, and the eBPF C programs
// BSD-2-Clause OR GPL-2.0-only (their "Dual BSD/GPL"). Generated Go files
// (bpf2go's) are left as their generator writes them.
func TestSPDXHeaders(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	generated := regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
	checked := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") && name != ".ci" || name == "bin" || name == "dist" || name == "node_modules" || name == "target") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch filepath.Ext(name) {
		case ".go", ".c", ".h", ".sh", ".py":
		default:
			if rel != filepath.Join(".ci", "run") {
				return nil
			}
		}
		if strings.HasPrefix(name, "vmlinux") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		head := b[:min(len(b), 2048)]
		if filepath.Ext(name) == ".go" && generated.Match(head) {
			return nil
		}
		want := "SPDX-License-Identifier: Apache-2.0"
		if strings.Contains(rel, filepath.Join("bpfsource", "bpf")+string(filepath.Separator)) {
			want = "SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only"
		}
		if !bytes.Contains(head[:min(len(head), 400)], []byte(want)) {
			t.Errorf("%s: no %q near its top", rel, want)
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("only %d source files checked: is the walk rooted at the repository?", checked)
	}
}

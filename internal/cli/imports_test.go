// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"go/build"
	"strings"
	"testing"
)

// TestNoKernelReader keeps the CLI thin: flags, options and exit codes.
// The kernel readers are the collectors' and the tracer's to call; a
// command that needs one asks the package that owns its domain.
func TestNoKernelReader(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatalf("read the package's imports: %v", err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports read")
	}
	for _, imp := range pkg.Imports {
		for _, reader := range []string{"sockdiag", "procnet", "procs"} {
			if strings.HasSuffix(imp, "/internal/"+reader) {
				t.Errorf("internal/cli imports %s: the kernel readers belong to collect, trace and the like", imp)
			}
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoLabInProduct: the shipped binary links none of the lab, its
// traffic generators and link emulator, the benches, tcpdoctor-lab's
// commands or the test kits (they are tcpdoctor-lab's and the tests').
func TestNoLabInProduct(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/tcpdoctor/tcpdoctor/internal/"
	var n int
	for _, pkg := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(pkg, mod)
		if !ok {
			continue
		}
		n++
		for _, banned := range []string{"lab", "labcli", "bench", "testkit"} {
			if rest == banned || strings.HasPrefix(rest, banned+"/") {
				t.Errorf("tcpdoctor links %s", pkg)
			}
		}
	}
	if n == 0 {
		t.Fatalf("go list -deps named none of the module's packages:\n%s", out)
	}
}

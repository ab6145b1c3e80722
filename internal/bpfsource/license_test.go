// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestProgramLicence: every committed program says "Dual BSD/GPL" (the
// project's licence for its eBPF C; GPL-compatible, as the kernel requires
// for the helpers the programs call).
func TestProgramLicence(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){
		"events": loadEvents, "lifecycle": loadLifecycle, "owners": loadOwners,
		"socklocks": loadSocklocks, "traceprog": loadTraceprog,
	} {
		spec, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for pn, p := range spec.Programs {
			if p.License != "Dual BSD/GPL" {
				t.Errorf("%s/%s: licence %q, want \"Dual BSD/GPL\"", name, pn, p.License)
			}
		}
	}
}

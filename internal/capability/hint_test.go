// SPDX-License-Identifier: Apache-2.0

package capability_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

func TestPermissionHint(t *testing.T) {
	err := fmt.Errorf("check: %w", fmt.Errorf("netns: enter x: %w (%w)", syscall.EPERM, netns.ErrPermission))
	lacking := func(uint) bool { return false }
	if got := capability.Hint(err, lacking); got != "; run as root or grant CAP_SYS_ADMIN" {
		t.Errorf("lacking the capability: %q", got)
	}
	if got := capability.Hint(err, func(uint) bool { return true }); got != "" {
		t.Errorf("holding the capability: %q", got)
	}
	if got := capability.Hint(fmt.Errorf("x: %w", syscall.EPERM), lacking); got != "" {
		t.Errorf("no package sentinel: %q", got)
	}
}

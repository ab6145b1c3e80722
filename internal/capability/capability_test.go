// SPDX-License-Identifier: Apache-2.0

package capability

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHave: root holds CAP_SYS_ADMIN unless it was dropped; anyone else
// does not (a test run as root in a container without it says so); a
// capability number past the set is never held.
func TestHave(t *testing.T) {
	if os.Geteuid() != 0 && Have(unix.CAP_SYS_ADMIN) {
		t.Error("CAP_SYS_ADMIN held without root")
	}
	if os.Geteuid() == 0 && !Have(unix.CAP_SYS_ADMIN) {
		t.Log("root without CAP_SYS_ADMIN (dropped by the runner)")
	}
	if Have(200) {
		t.Error("capability 200 held")
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package capability says which Linux capabilities this process holds: what a
// refusal (EPERM) means depends on it.
package capability

import "golang.org/x/sys/unix"

// Have reports whether capability c (unix.CAP_*) is in the calling
// thread's effective set.
func Have(c uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil || c >= 64 {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

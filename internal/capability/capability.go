// SPDX-License-Identifier: Apache-2.0

// Package capability says which Linux capabilities this process holds: what a
// refusal (EPERM) means depends on it.
package capability

import (
	"errors"

	"golang.org/x/sys/unix"
)

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

// Missing is a package's sentinel for a refusal that capability Cap
// (named Name) lifts; its text is the sentinel's.
type Missing struct {
	Cap  uint
	Name string
	Text string
}

func (m *Missing) Error() string { return m.Text }

// Hint says how to get the permission err lacked: the capability a
// *Missing in its chain names, when have (Have) says this process does
// not hold it (holding it, something else refused: an LSM or a user
// namespace). It is "" otherwise.
func Hint(err error, have func(uint) bool) string {
	var m *Missing
	if errors.As(err, &m) && !have(m.Cap) {
		return "; run as root or grant " + m.Name
	}
	return ""
}

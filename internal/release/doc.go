// SPDX-License-Identifier: Apache-2.0

// Package release holds the checks of the release artifacts that
// scripts/release.sh builds (docs/release.md): run by
// scripts/release-test.sh, which builds them and says where they are;
// without it the tests skip and say how to run them.
package release

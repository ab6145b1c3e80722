// SPDX-License-Identifier: Apache-2.0

// Package remedy builds the fixes rules prescribe, with their values
// worked out and in each ecosystem's own terms (the listen() backlog in
// Netty, Tomcat, nginx, Redis; connection reuse in nginx, Java, Go,
// Python and Redis clients; sysctls with the command that sets them), so
// that rules which meet the same cause prescribe the same fix.
package remedy

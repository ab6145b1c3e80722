// SPDX-License-Identifier: Apache-2.0

// Package tcpmodel is tcpdoctor's one model of the kernel's TCP facts:
// the ephemeral port space a connect() picks from (with TIME_WAIT reuse),
// connection churn per opener and service, listener fill, socket owners
// and the service a server-side socket belongs to, buffer pinning, and
// what limits a flow against its path. Rules and the exporter both derive
// from it, so they cannot drift. Everything here is a pure function of
// snapshots: no I/O, no clock.
package tcpmodel

// SPDX-License-Identifier: Apache-2.0

// Package output is the output layer's shared part: Subject, the one
// place that formats what a printed line is about (its network namespace
// and process; pods and containers go here too), and the address cells of
// tables. Sizes, rates and round-trip times print through internal/units,
// in its one style.
//
// The printers that use it: internal/report (check, text and JSON),
// internal/output/sockets (sockets: the table, the JSON stream and the
// eBPF event tables), internal/trace's table.go and html.go (trace), and
// internal/watch's format.go (watch lines). Every string from outside
// goes through textsafe.String in text; JSON escapes by its own rules.
package output

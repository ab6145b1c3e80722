// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"testing"
	"time"
)

// tpQuick runs one of the throughput scenarios in quick form.
func tpQuick(t *testing.T, s Scenario) { runQuick(t, s, 3*time.Minute) }

func TestC3PinnedSndbufQuick(t *testing.T)   { tpQuick(t, c3PinnedSndbuf()) }
func TestC5SmallRcvbufQuick(t *testing.T)    { tpQuick(t, c5SmallRcvbuf()) }
func TestC1RPCConnectionsQuick(t *testing.T) { tpQuick(t, c1RPCConnections()) }

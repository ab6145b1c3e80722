// SPDX-License-Identifier: Apache-2.0

// Command tcpdoctor-lab reproduces tcpdoctor's case catalogue in network
// namespaces and measures tcpdoctor; it runs the tcpdoctor binary.
package main

import (
	"os"

	"github.com/tcpdoctor/tcpdoctor/internal/labcli"
)

func main() {
	os.Exit(labcli.Main(os.Args[1:], labcli.DefaultEnv()))
}

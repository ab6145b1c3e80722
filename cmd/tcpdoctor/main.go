// SPDX-License-Identifier: Apache-2.0

// Command tcpdoctor tells why TCP services are slow or fail to connect.
package main

import (
	"os"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.DefaultEnv()))
}

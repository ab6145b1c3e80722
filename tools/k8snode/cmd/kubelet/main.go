// SPDX-License-Identifier: Apache-2.0

// Command kubelet is Kubernetes' own kubelet, built from k8s.io/kubernetes at the
// version this module's go.mod pins.
package main

import (
	"context"
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}

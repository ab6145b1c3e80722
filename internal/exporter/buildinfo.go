// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// NewBuildInfo returns the tcpdoctor_build_info gauge: always 1, its
// labels the build (node_exporter's label names, those a Go build knows).
func NewBuildInfo(b version.Info) prometheus.Collector {
	goos, goarch, _ := strings.Cut(b.Platform, "/")
	revision := b.Commit
	if revision != "" && b.Modified {
		revision += "-modified"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tcpdoctor_build_info",
		Help: "A metric with a constant '1' value labelled by the version, revision (git commit), Go version, GOOS and GOARCH tcpdoctor was built from.",
		ConstLabels: prometheus.Labels{
			"version":   b.Version,
			"revision":  revision,
			"goversion": b.GoVersion,
			"goos":      goos,
			"goarch":    goarch,
		},
	}, func() float64 { return 1 })
}

// SPDX-License-Identifier: Apache-2.0

package exporter

// TestWebConfig is webConfig for the external tests (prometheus_tls_test.go).
var TestWebConfig = webConfig

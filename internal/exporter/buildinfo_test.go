// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

func TestBuildInfo(t *testing.T) {
	b := version.Info{Version: "v1.2.3", Commit: "0123456789abcdef", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}
	want := `# HELP tcpdoctor_build_info A metric with a constant '1' value labelled by the version, revision (git commit), Go version, GOOS and GOARCH tcpdoctor was built from.
# TYPE tcpdoctor_build_info gauge
tcpdoctor_build_info{goarch="arm64",goos="linux",goversion="go1.26.8",revision="0123456789abcdef-modified",version="v1.2.3"} 1
`
	if err := testutil.CollectAndCompare(NewBuildInfo(b), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(NewBuildInfo(b)); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

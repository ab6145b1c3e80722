// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
)

// TestServeWebFlags: the exporter-toolkit flags' mistakes are usage
// errors said before anything is collected or served.
func TestServeWebFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:1", "--web.listen-address", "127.0.0.1:2"}, "give one"},
		{[]string{"--web.systemd-socket", "--listen", "127.0.0.1:1"}, "drop --web.listen-address"},
		{[]string{"--web.config.file", "/nonexistent/web.yml"}, "--web.config.file /nonexistent/web.yml"},
		{[]string{"--web.systemd-socket"}, "systemd passed no listening socket"},
		{[]string{"--listen", "256.0.0.1:1"}, "serve:"},
		{[]string{"--web.external-url", "ftp://proxy.example/x", "--history", "/nonexistent"}, "--web.external-url \"ftp://proxy.example/x\""},
		{[]string{"--web.external-url", "https://proxy.example/x?a=b"}, "want http:// or https://"},
		{[]string{"--web.external-url", "https://proxy.example/x"}, "give --history"},
		{[]string{"--web.external-url", "https://proxy.example/x", "--history", "/nonexistent", "--history-pages=false"}, "give --history"},
	} {
		code, _, errOut := run(t, append([]string{"serve", "--bpf", "off", "--no-owners"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("serve %v: code %d, stderr %q; want %d and %q", tc.args, code, errOut, ExitUsage, tc.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/serve"
)

// webOpts are serve's exporter-toolkit flags (docs/exporter.md).
type webOpts struct {
	addr      string
	legacy    string // --listen, the older name of --web.listen-address
	systemd   bool
	config    string
	external  string
	listenSet func() (web, legacy bool)
}

const defaultListen = "127.0.0.1:9477"

func (w *webOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.addr, "web.listen-address", defaultListen, "address to serve /metrics on (host:port; :9477 for every address)")
	fs.StringVar(&w.legacy, "listen", defaultListen, "the same as --web.listen-address (its older name)")
	fs.BoolVar(&w.systemd, "web.systemd-socket", false, "serve on the socket systemd passes (socket activation) instead of --web.listen-address")
	fs.StringVar(&w.config, "web.config.file", "", "exporter-toolkit web configuration: TLS and basic authentication (docs/exporter.md)")
	fs.StringVar(&w.external, "web.external-url", "", "with --history: the URL serve is reached at, for the evidence pages' links and the alerts' evidence annotation (https://node-1.example:9477, or behind a proxy https://proxy/tcpdoctor/node-1; default: the scheme and address the request came to)")
	w.listenSet = func() (bool, bool) {
		return fs.Changed("web.listen-address"), fs.Changed("listen")
	}
}

func (w *webOpts) validate() error {
	webSet, legacySet := w.listenSet()
	switch {
	case webSet && legacySet && w.addr != w.legacy:
		return usageErr("serve: --listen %s and --web.listen-address %s: give one (they are the same flag)", w.legacy, w.addr)
	case legacySet:
		w.addr = w.legacy
	}
	if w.systemd && (webSet || legacySet) {
		return usageErr("serve: --web.systemd-socket serves on systemd's socket: drop --web.listen-address")
	}
	if err := serve.CheckExternal(w.external); err != nil {
		return usageErr("serve: %v", err)
	}
	if err := w.exporter().Validate(); err != nil {
		return usageErr("serve: %v", err)
	}
	return nil
}

func (w *webOpts) exporter() exporter.Web {
	return exporter.Web{ListenAddress: w.addr, SystemdSocket: w.systemd, ConfigFile: w.config}
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// Web is how the exporter is reached, the flags every exporter built on
// prometheus/exporter-toolkit takes (docs/exporter.md, "TLS and basic
// authentication").
type Web struct {
	// ListenAddress is --web.listen-address (alias --listen): host:port.
	ListenAddress string
	// SystemdSocket is --web.systemd-socket: serve on the one socket
	// systemd passes (LISTEN_FDS) instead of ListenAddress.
	SystemdSocket bool
	// ConfigFile is --web.config.file: the exporter-toolkit web
	// configuration (tls_server_config, basic_auth_users,
	// http_server_config); empty serves plain HTTP to everyone.
	ConfigFile string
}

// Validate checks the web configuration file as the toolkit will read it
// (a missing file, bad YAML, a key without a certificate, a user whose
// password is not a bcrypt hash), so a mistake is a usage error before
// anything is collected.
func (w Web) Validate() error {
	if w.ConfigFile == "" {
		return nil
	}
	if err := web.Validate(w.ConfigFile); err != nil {
		return fmt.Errorf("--web.config.file %s: %w", w.ConfigFile, err)
	}
	return nil
}

// TLS reports whether the configuration file turns TLS on (the scheme
// serve announces). Call after Validate.
func (w Web) TLS() bool {
	if w.ConfigFile == "" {
		return false
	}
	c, err := readWebConfig(w.ConfigFile)
	return err == nil && c.TLSConfig.IsEnabled()
}

func readWebConfig(path string) (*web.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &web.Config{}
	if err := yaml.Unmarshal(b, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Listen opens the listener: the systemd socket, or ListenAddress.
func (w Web) Listen() (net.Listener, error) {
	if !w.SystemdSocket {
		return net.Listen("tcp", w.ListenAddress)
	}
	ls, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("--web.systemd-socket: %w", err)
	}
	var got []net.Listener
	for _, l := range ls {
		if l != nil {
			got = append(got, l)
		}
	}
	switch len(got) {
	case 1:
		return got[0], nil
	case 0:
		return nil, errors.New("--web.systemd-socket: systemd passed no listening socket (LISTEN_FDS unset, or for another process)")
	default:
		for _, l := range got {
			_ = l.Close()
		}
		return nil, fmt.Errorf("--web.systemd-socket: systemd passed %d sockets; tcpdoctor serves on one", len(got))
	}
}

// Page is more served beside /metrics, behind the same TLS and
// authentication: Handler answers Path and everything under it, and the
// landing page links it as Text.
type Page struct {
	Path, Text string
	Handler    http.Handler
}

// Handler serves metrics (Handler's /metrics), pages, and the toolkit's
// landing page at / naming version.
func (w Web) Handler(metrics http.Handler, version string, pages ...Page) (http.Handler, error) {
	links := []web.LandingLinks{{Address: "/metrics", Text: "Metrics"}}
	for _, p := range pages {
		links = append(links, web.LandingLinks{Address: p.Path, Text: p.Text})
	}
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "tcpdoctor",
		Description: "Why TCP services on this host are slow or fail to connect, as Prometheus metrics",
		Version:     version,
		Links:       links,
		Profiling:   "false", // no /debug/pprof here: its links would be 404s
	})
	if err != nil {
		return nil, fmt.Errorf("landing page: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	for _, p := range pages {
		mux.Handle(p.Path, p.Handler)
		mux.Handle(p.Path+"/", p.Handler)
	}
	mux.Handle("/", landing)
	return mux, nil
}

// Serve serves srv on l with TLS and basic authentication from
// ConfigFile as the toolkit does (the file re-read for each new TLS
// connection and each request; its certificates, client CAs, versions,
// ciphers, headers, rate_limit and http2), but with authentication
// bounded (auth.go) and the connection cap told that requests must
// authenticate (Listener.requireAuth). Errors reading the file go to log.
func (w Web) Serve(srv *http.Server, l net.Listener, log io.Writer) error {
	if w.ConfigFile == "" {
		return srv.Serve(l)
	}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := web.Validate(w.ConfigFile); err != nil {
		return err
	}
	c, err := readToolkitConfig(w.ConfigFile)
	if err != nil {
		return err
	}
	if sl, ok := l.(*Listener); ok && len(c.Users) > 0 {
		sl.requireAuth()
	}
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	srv.Handler = newAuthHandler(w.ConfigFile, c, next, func(err error) {
		logger.Error("Unable to parse configuration", "err", err.Error())
	})
	if !c.TLSConfig.IsEnabled() {
		return srv.Serve(l)
	}
	cfg, err := web.ConfigToTLSConfig(&c.TLSConfig)
	if err != nil {
		return err
	}
	if !c.HTTPConfig.HTTP2 {
		srv.TLSNextProto = make(map[string]func(*http.Server, *tls.Conn, http.Handler))
	}
	srv.TLSConfig = cfg
	path := w.ConfigFile
	srv.TLSConfig.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := readToolkitConfig(path)
		if err != nil {
			logger.Error("Unable to parse configuration", "err", err.Error())
			return nil, err
		}
		cfg, err := web.ConfigToTLSConfig(&c.TLSConfig)
		if err != nil {
			return nil, err
		}
		cfg.NextProtos = []string{"http/1.1"}
		if c.HTTPConfig.HTTP2 && srv.TLSNextProto["h2"] != nil {
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		return cfg, nil
	}
	return srv.ServeTLS(l, "", "")
}

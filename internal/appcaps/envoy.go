// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Envoy's names for its two connection limits in a bootstrap file: an
// extension is known by its name or by its typed_config's type URL.
const (
	envoyGlobalMonitor = "envoy.resource_monitors.global_downstream_max_connections"
	envoyConnsMonitor  = "envoy.resource_monitors.downstream_connections"
	envoyConnsType     = "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig"
	envoyLimitFilter   = "envoy.filters.network.connection_limit"
	envoyLimitType     = "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit"
)

// envoyConfigPath reads the bootstrap file of Envoy's command line (-c or
// --config-path). A bootstrap given whole or in part on the command line
// (--config-yaml) is not read: what it overrides is unknown.
func envoyConfigPath(argv []string) (string, error) {
	p := ""
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-c" || a == "--config-path":
			if i+1 < len(argv) {
				i++
				p = argv[i]
			}
		case strings.HasPrefix(a, "--config-path="):
			p = strings.TrimPrefix(a, "--config-path=")
		case a == "--config-yaml" || strings.HasPrefix(a, "--config-yaml="):
			return "", fmt.Errorf("--config-yaml on the command line: the bootstrap is not read")
		}
	}
	if p == "" {
		return "", fmt.Errorf("no -c on the command line: the bootstrap is unknown")
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("bootstrap %q is relative to a working directory that may have changed", p)
	}
	if !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml") && !strings.HasSuffix(p, ".json") {
		return "", fmt.Errorf("bootstrap %q is not YAML or JSON (binary and text protobuf are not read)", p)
	}
	return p, nil
}

// parseEnvoy reads the connection limits of an Envoy bootstrap (YAML or
// JSON): the overload manager's global downstream limit (every listener)
// and each static listener's connection_limit filter, over its port.
// Listeners a control plane sends (LDS) are in no file.
func parseEnvoy(b []byte, file string) ([]*snapshot.AppCap, error) {
	var root map[any]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []*snapshot.AppCap
	add := func(setting, where string, v any, ports []uint16) error {
		n, err := envoyUint(v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", file, where, err)
		}
		out = append(out, &snapshot.AppCap{App: "envoy", Setting: setting, Value: n, Source: file + " " + where,
			Per: snapshot.CapPerListener, Ports: ports})
		return nil
	}
	om := envoyMap(root["overload_manager"])
	for i, m := range envoyList(om["resource_monitors"]) {
		mon := envoyMap(m)
		tc := envoyMap(mon["typed_config"])
		if n := envoyStr(mon["name"]); n != envoyGlobalMonitor && n != envoyConnsMonitor && !strings.HasSuffix(envoyStr(tc["@type"]), "/"+envoyConnsType) {
			continue
		}
		if v, ok := tc["max_active_downstream_connections"]; ok {
			if err := add("max_active_downstream_connections", fmt.Sprintf("overload_manager.resource_monitors[%d]", i), v, nil); err != nil {
				return nil, err
			}
		}
	}
	named := 0
	for i, l := range envoyList(envoyMap(root["static_resources"])["listeners"]) {
		ln := envoyMap(l)
		name := capName(envoyStr(ln["name"]))
		if name == "" {
			name = strconv.Itoa(i)
		}
		sa := envoyMap(envoyMap(ln["address"])["socket_address"])
		port, err := envoyUint(sa["port_value"])
		if err != nil || port > 65535 {
			continue // a pipe, an internal listener or a named port: no port to match
		}
		for j, c := range envoyList(ln["filter_chains"]) {
			for k, f := range envoyList(envoyMap(c)["filters"]) {
				fm := envoyMap(f)
				tc := envoyMap(fm["typed_config"])
				if envoyStr(fm["name"]) != envoyLimitFilter && !strings.HasSuffix(envoyStr(tc["@type"]), "/"+envoyLimitType) {
					continue
				}
				v, ok := tc["max_connections"]
				if !ok {
					continue
				}
				if named++; named > maxNamed {
					continue
				}
				where := fmt.Sprintf("static_resources.listeners[%s].filter_chains[%d].filters[%d]", name, j, k)
				if err := add(fmt.Sprintf("max_connections (connection_limit, listener %s)", name), where, v, []uint16{uint16(port)}); err != nil {
					return nil, err
				}
			}
		}
	}
	if named > maxNamed {
		return out, &partial{leftOut("listener filters", named)}
	}
	return out, nil
}

func envoyMap(v any) map[any]any { m, _ := v.(map[any]any); return m }
func envoyList(v any) []any      { l, _ := v.([]any); return l }
func envoyStr(v any) string      { s, _ := v.(string); return s }

// envoyUint reads a protobuf unsigned number as YAML and JSON write it: a
// number, or a string of one (proto3 JSON's 64-bit form).
func envoyUint(v any) (int64, error) {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		if x > 1<<62 {
			return 0, fmt.Errorf("%d is too large", x)
		}
		n = int64(x)
	case string:
		p, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", frag(x))
		}
		n = p
	default:
		return 0, fmt.Errorf("a %T is not a number", v)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%d is not a positive number", n)
	}
	return n, nil
}

// envoy reads the connection limits of the bootstrap file Envoy's -c names.
func (r Reader) envoy(fsys budgetFS, pid int) ([]*snapshot.AppCap, error) {
	argv, err := r.cmdline(pid)
	if err != nil {
		return nil, err
	}
	file, err := envoyConfigPath(argv)
	if err != nil {
		return nil, err
	}
	b, err := readFile(fsys, file)
	if err != nil {
		return nil, err
	}
	caps, err := parseEnvoy(b, file)
	if err != nil && !errors.As(err, new(*partial)) {
		return nil, err
	}
	for _, c := range caps {
		c.Pid = pid
		c.Related = []snapshot.AppSetting{{Name: "config", Value: file, Source: "its -c (/proc/PID/cmdline)"}}
	}
	return caps, err
}

// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// envoyCaps runs Fill on an envoy pid 400 started with argv (NUL
// separated) whose root is a copy of testdata/envoy.
func envoyCaps(t *testing.T, argv string) *snapshot.Snapshot {
	t.Helper()
	root := t.TempDir()
	must(t, os.CopyFS(root, os.DirFS("testdata/envoy")))
	proc := t.TempDir()
	d := filepath.Join(proc, "400")
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(argv), 0o644))
	must(t, os.WriteFile(filepath.Join(d, "stat"), []byte("400 (envoy) S 1 1 1 0 -1\n"), 0o644))
	must(t, os.Symlink(root, filepath.Join(d, "root")))
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(400)}},
		Procs: map[int]*snapshot.Proc{400: {Pid: 400, Command: "envoy"}}}
	Reader{ProcRoot: proc}.Fill(s)
	return s
}

// TestEnvoyBootstrap: the overload manager's global downstream limit
// covers every listener, the connection_limit filter its listener's port;
// a listener without the filter has no cap of its own. The JSON form
// (numbers as proto3 JSON strings, extensions known by their type URL
// under names of the user's) reads the same.
func TestEnvoyBootstrap(t *testing.T) {
	s := envoyCaps(t, "envoy\x00-c\x00/etc/envoy/envoy.yaml\x00--log-level\x00info\x00")
	if len(s.Errors) != 0 || len(s.AppCaps) != 2 {
		t.Fatalf("caps %+v errors %+v, want 2", s.AppCaps, s.Errors)
	}
	g, l := s.AppCaps[0], s.AppCaps[1]
	if g.Setting != "max_active_downstream_connections" || g.Value != 50000 || len(g.Ports) != 0 || g.Pid != 400 ||
		g.Source != "/etc/envoy/envoy.yaml overload_manager.resource_monitors[0]" || g.Command != "envoy" {
		t.Errorf("global: %+v", g)
	}
	if l.Setting != "max_connections (connection_limit, listener listener_http)" || l.Value != 1000 || len(l.Ports) != 1 || l.Ports[0] != 10000 ||
		!strings.HasSuffix(l.Source, "static_resources.listeners[listener_http].filter_chains[0].filters[0]") || l.Per != snapshot.CapPerListener {
		t.Errorf("listener: %+v", l)
	}
	if r, ok := l.RelatedValue("config"); !ok || r.Value != "/etc/envoy/envoy.yaml" {
		t.Errorf("config: %+v", l.Related)
	}
	s = envoyCaps(t, "/usr/local/bin/envoy\x00--config-path=/etc/envoy/envoy.json\x00")
	if len(s.Errors) != 0 || len(s.AppCaps) != 2 || s.AppCaps[0].Value != 20000 || len(s.AppCaps[0].Ports) != 0 ||
		s.AppCaps[1].Value != 256 || len(s.AppCaps[1].Ports) != 1 || s.AppCaps[1].Ports[0] != 8443 {
		t.Errorf("json: caps %+v errors %+v", s.AppCaps, s.Errors)
	}
	for argv, want := range map[string]string{
		"envoy\x00":                              "no -c",
		"envoy\x00-c\x00envoy.yaml\x00":          "relative",
		"envoy\x00-c\x00/etc/envoy/envoy.pb\x00": "not YAML or JSON",
		"envoy\x00-c\x00/etc/envoy/envoy.yaml\x00--config-yaml\x00{}\x00": "--config-yaml",
		"envoy\x00-c\x00/etc/envoy/missing.yaml\x00":                      "missing.yaml",
	} {
		s := envoyCaps(t, argv)
		if len(s.AppCaps) != 0 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, want) {
			t.Errorf("%q: caps %+v errors %+v, want one error saying %q", argv, s.AppCaps, s.Errors, want)
		}
	}
}

// TestEnvoyBadValues: a limit that is no positive number is an error
// naming where it is, never a default.
func TestEnvoyBadValues(t *testing.T) {
	for _, doc := range []string{
		"static_resources: {listeners: [{address: {socket_address: {port_value: 80}}, filter_chains: [{filters: [{name: envoy.filters.network.connection_limit, typed_config: {max_connections: -1}}]}]}]}",
		"overload_manager: {resource_monitors: [{name: envoy.resource_monitors.global_downstream_max_connections, typed_config: {max_active_downstream_connections: many}}]}",
		"static_resources: [",
	} {
		if caps, err := parseEnvoy([]byte(doc), "/e.yaml"); err == nil || !strings.Contains(err.Error(), "/e.yaml") {
			t.Errorf("%s: caps %+v, err %v", doc, caps, err)
		}
	}
}

// FuzzEnvoy: the bootstrap reader never panics on any bytes.
func FuzzEnvoy(f *testing.F) {
	b, err := os.ReadFile("testdata/envoy/etc/envoy/envoy.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"static_resources":{"listeners":[{"address":{"socket_address":{"port_value":"70000"}}}]}}`))
	f.Add([]byte("a: &x [*x]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzBounded(t, func() { _, _ = parseEnvoy(b, "/f.yaml") })
	})
}

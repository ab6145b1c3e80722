// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// tomcatCaps runs Fill on a java (Tomcat) pid 400 whose root is a copy of
// testdata/debian-tomcat with Debian's
// /var/lib/tomcat10/conf -> /etc/tomcat10 link; edit, when set, rewrites
// server.xml.
func tomcatCaps(t *testing.T, edit func(string) string) *snapshot.Snapshot {
	t.Helper()
	root := t.TempDir()
	must(t, os.CopyFS(root, os.DirFS("testdata/debian-tomcat")))
	must(t, os.MkdirAll(filepath.Join(root, "var/lib/tomcat10"), 0o755))
	must(t, os.Symlink("/etc/tomcat10", filepath.Join(root, "var/lib/tomcat10/conf")))
	if edit != nil {
		f := filepath.Join(root, "etc/tomcat10/server.xml")
		b, err := os.ReadFile(f)
		must(t, err)
		must(t, os.WriteFile(f, []byte(edit(string(b))), 0o644))
	}
	proc := t.TempDir()
	d := filepath.Join(proc, "400")
	must(t, os.MkdirAll(d, 0o755))
	argv := "/usr/lib/jvm/java-17-openjdk-amd64/bin/java\x00-Djava.util.logging.config.file=/var/lib/tomcat10/conf/logging.properties\x00-classpath\x00/usr/share/tomcat10/bin/bootstrap.jar\x00-Dcatalina.base=/var/lib/tomcat10\x00-Dcatalina.home=/usr/share/tomcat10\x00org.apache.catalina.startup.Bootstrap\x00start\x00"
	must(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(argv), 0o644))
	must(t, os.Symlink(root, filepath.Join(d, "root")))
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(400)}},
		Procs: map[int]*snapshot.Proc{400: {Pid: 400, Command: "java"}}}
	Reader{ProcRoot: proc}.Fill(s)
	return s
}

// TestTomcatDebian: Debian's server.xml has one Connector (8080) with
// Tomcat's defaults (the commented-out ones are not read); set values and
// a shared Executor's maxThreads are read with their lines.
func TestTomcatDebian(t *testing.T) {
	s := tomcatCaps(t, nil)
	if len(s.Errors) > 0 || len(s.AppCaps) != 1 {
		t.Fatalf("caps %+v errors %+v", s.AppCaps, s.Errors)
	}
	c := s.AppCaps[0]
	if c.Value != 8192 || c.Setting != "maxConnections (Connector port 8080)" || len(c.Ports) != 1 || c.Ports[0] != 8080 ||
		c.Source != "default (no maxConnections on the Connector at /var/lib/tomcat10/conf/server.xml:70)" {
		t.Errorf("cap %+v", c)
	}
	if r, _ := c.RelatedValue("maxThreads"); r.Value != "200" || r.Source != "default" {
		t.Errorf("maxThreads %+v", r)
	}
	s = tomcatCaps(t, func(x string) string {
		x = strings.Replace(x, `<Connector port="8080" protocol="HTTP/1.1"`, `<Executor name="pool" maxThreads="75"/>
    <Connector port="8080" protocol="HTTP/1.1" executor="pool" maxConnections="500" acceptCount="300"`, 1)
		return strings.Replace(x, `<Service name="Catalina">`, `<Service name="Catalina">
    <Connector port="${port.ajp}" protocol="AJP/1.3"/>
    <Connector port="9090" maxConnections="-1"/>`, 1)
	})
	if len(s.Errors) > 0 || len(s.AppCaps) != 1 {
		t.Fatalf("edited: caps %+v errors %+v", s.AppCaps, s.Errors)
	}
	c = s.AppCaps[0]
	mt, _ := c.RelatedValue("maxThreads")
	ac, _ := c.RelatedValue("acceptCount")
	if c.Value != 500 || !strings.HasSuffix(c.Source, "server.xml:73") || mt.Value != "75" || !strings.Contains(mt.Source, "server.xml:72 (Executor pool)") || ac.Value != "300" {
		t.Errorf("edited: cap %+v, maxThreads %+v, acceptCount %+v", c, mt, ac)
	}
	// Not well-formed: an error, not a default.
	s = tomcatCaps(t, func(x string) string { return strings.Replace(x, "</Server>", "", 1) })
	if len(s.AppCaps) != 0 || len(s.Errors) != 1 {
		t.Errorf("broken: caps %+v errors %+v", s.AppCaps, s.Errors)
	}
}

// FuzzTomcat: any bytes give Connectors or an error, never a panic.
func FuzzTomcat(f *testing.F) {
	if b, err := os.ReadFile("testdata/debian-tomcat/etc/tomcat10/server.xml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`<Server><Connector port="1" maxConnections="x"/></Server>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzBounded(t, func() { _, _ = parseTomcat(b, "f") })
	})
}

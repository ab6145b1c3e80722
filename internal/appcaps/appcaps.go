// Package appcaps reads the connection limits servers set for themselves
// (nginx worker_connections, ...) from their own configuration, as the
// process sees it: its command line from /proc/PID/cmdline and its files
// through /proc/PID/root, so a server in a container is read from the
// container's files. It only reads: it never runs a server's binary and
// never connects to it.
package appcaps

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Reader reads the caps of the processes that own listeners.
type Reader struct {
	// ProcRoot is "/proc" in production.
	ProcRoot string
}

// nginxDefaultConf is where Debian's nginx (and nginx.org's packages)
// look without -c: --conf-path of the build.
const nginxDefaultConf = "/etc/nginx/nginx.conf"

// Fill adds the caps of the servers owning s's listeners to s.AppCaps and
// records the servers whose configuration could not be read as
// appcaps errors (the rule then names the plateau without the setting).
func (r Reader) Fill(s *snapshot.Snapshot) {
	owners := listenerOwners(s)
	caps := []snapshot.AppCap{}
	done := map[int]bool{}
	for _, pid := range owners {
		p := s.Procs[pid]
		if done[pid] || p == nil {
			continue
		}
		done[pid] = true
		var got []*snapshot.AppCap
		var err error
		switch p.Command {
		case "nginx":
			argv, rerr := r.cmdline(pid)
			if rerr != nil || !strings.HasPrefix(strings.Join(argv, " "), "nginx: master process") {
				continue // gone since the owner scan, or a worker: read with its master
			}
			got, err = one(r.nginx(pid, argv, owners))
		case "redis-server":
			got, err = one(r.redis(pid, p))
		case "postgres", "postmaster":
			got, err = one(r.postgres(pid))
		case "memcached":
			got, err = one(r.memcached(pid))
		case "java":
			argv, rerr := r.cmdline(pid)
			if rerr != nil || catalinaBase(argv) == "" {
				continue // not Tomcat
			}
			got, err = r.tomcat(pid, catalinaBase(argv))
		case "envoy":
			got, err = r.envoy(pid)
		case "haproxy":
			if pp, perr := r.ppid(pid); perr == nil && slices.Contains(owners, pp) && s.Procs[pp] != nil && s.Procs[pp].Command == "haproxy" {
				continue // a worker of a master that owns listeners too: read with it
			}
			got, err = r.haproxy(pid)
		default:
			continue
		}
		if err != nil {
			s.AddError(snapshot.SourceAppCaps, fmt.Errorf("%s pid %d: %w", p.Command, pid, err))
			continue
		}
		for _, c := range got {
			c.Command = p.Command
			caps = append(caps, *c)
		}
	}
	s.AppCaps = caps
}

// listenerOwners is every pid owning a LISTEN socket of s, sorted.
func listenerOwners(s *snapshot.Snapshot) []int {
	var pids []int
	for i := range s.Sockets {
		if s.Sockets[i].State == snapshot.Listen {
			pids = append(pids, s.Sockets[i].Pids.List()...)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// cmdline reads /proc/PID/cmdline. A process that rewrote its title into
// argv (nginx, redis) has one or a few words separated by blanks there:
// those are split too.
func (r Reader) cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/cmdline", r.ProcRoot, pid))
	if err != nil {
		return nil, err
	}
	return splitCmdline(b), nil
}

// splitCmdline splits a NUL-separated command line, and then each part on
// blanks when the process rewrote its title (a single part holding them).
func splitCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	parts := strings.Split(string(b), "\x00")
	var out []string
	for _, p := range parts {
		if len(parts) == 1 || strings.TrimRight(p, " ") != p {
			out = append(out, strings.Fields(p)...)
			continue
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ppid reads the parent of pid from /proc/PID/stat.
func (r Reader) ppid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", r.ProcRoot, pid))
	if err != nil {
		return 0, err
	}
	return parsePPid(b)
}

// parsePPid takes the fourth field of /proc/PID/stat (after the command,
// which may hold blanks and parentheses).
func parsePPid(b []byte) (int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat without a command")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("stat too short")
	}
	return strconv.Atoi(f[1])
}

// nginxArgs is what nginx's master was started with.
type nginxArgs struct {
	conf, prefix string
	// globals is -g's directives, if any.
	globals string
}

// parseNginxArgs reads the options nginx keeps in its master's title
// ("nginx: master process nginx -c FILE -p DIR -g '...'"). Words were
// split on blanks: a path holding one cannot be read back.
func parseNginxArgs(argv []string) nginxArgs {
	var a nginxArgs
	// Skip "nginx:", "master", "process" and the program name.
	i := 0
	for i < len(argv) && i < 4 {
		i++
	}
	for ; i < len(argv); i++ {
		w := argv[i]
		take := func(flag string) (string, bool) {
			if w == flag && i+1 < len(argv) {
				i++
				return argv[i], true
			}
			if strings.HasPrefix(w, flag) && len(w) > len(flag) {
				return w[len(flag):], true
			}
			return "", false
		}
		if v, ok := take("-c"); ok {
			a.conf = v
		} else if v, ok := take("-p"); ok {
			a.prefix = v
		} else if v, ok := take("-g"); ok {
			// -g runs to the next option.
			g := []string{v}
			for i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				g = append(g, argv[i])
			}
			a.globals = strings.Trim(strings.Join(g, " "), "'\"")
		}
	}
	return a
}

// nginx reads the cap of the nginx master pid.
func (r Reader) nginx(pid int, argv []string, owners []int) (*snapshot.AppCap, error) {
	a := parseNginxArgs(argv)
	conf, how := a.conf, "its -c"
	switch {
	case conf == "":
		conf, how = nginxDefaultConf, "nginx's default path"
	case !strings.HasPrefix(conf, "/"):
		// A relative -c is resolved in the prefix (-p, or the build's,
		// /usr/share/nginx on Debian), not the working directory.
		prefix := a.prefix
		if prefix == "" {
			prefix = "/usr/share/nginx"
		}
		conf = path.Join(prefix, conf)
	}
	root := fmt.Sprintf("%s/%d/root", r.ProcRoot, pid)
	nc, err := parseNginx(rootFS{dir: root}, conf)
	if err != nil {
		return nil, fmt.Errorf("config %s (%s): %w", conf, how, err)
	}
	if a.globals != "" {
		toks, err := nginxTokens([]byte(a.globals))
		if err == nil {
			g := &nginxReader{fsys: rootFS{dir: root}, prefix: path.Dir(conf), conf: nc}
			if err := g.block("command line -g", toks, nil, 0); err == nil {
				for _, s := range []*setting{nc.workerProcesses, nc.workerRlimitNofile} {
					if s != nil && strings.HasPrefix(s.source, "command line -g") {
						s.source = "command line -g"
					}
				}
			}
		}
	}
	c := &snapshot.AppCap{Pid: pid, App: "nginx", Setting: "worker_connections", Per: snapshot.CapPerProcess,
		Value: nginxDefaultConnections, Source: fmt.Sprintf("default (no worker_connections in %s)", strings.Join(nc.files, ", "))}
	if s := nc.workerConnections; s != nil {
		n, err := strconv.ParseInt(s.value, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: worker_connections %q is not a positive number", s.source, s.value)
		}
		c.Value, c.Source = n, s.source
	}
	// The workers: listener owners whose parent is the master.
	for _, w := range owners {
		if w == pid {
			continue
		}
		if pp, err := r.ppid(w); err == nil && pp == pid {
			c.Pids = append(c.Pids, w)
		}
	}
	c.Related = append(c.Related, snapshot.AppSetting{Name: "config", Value: conf, Source: how + " (/proc/PID/cmdline)"})
	wp := snapshot.AppSetting{Name: "worker_processes", Value: strconv.Itoa(nginxDefaultWorkers), Source: "default"}
	if s := nc.workerProcesses; s != nil {
		wp.Value, wp.Source = s.value, s.source
	}
	c.Related = append(c.Related, wp)
	if s := nc.workerRlimitNofile; s != nil {
		c.Related = append(c.Related, snapshot.AppSetting{Name: "worker_rlimit_nofile", Value: s.value, Source: s.source})
	}
	if s := nc.upstreamKeepalive; s != nil {
		c.Related = append(c.Related, snapshot.AppSetting{Name: "upstream keepalive", Value: s.value, Source: s.source})
	}
	return c, nil
}

// redis reads the maxclients of redis-server pid. Redis rewrites its
// command line into a title ("redis-server 127.0.0.1:6379"): the
// configuration file is then read from the ExecStart of the systemd
// service it runs in.
func (r Reader) redis(pid int, p *snapshot.Proc) (*snapshot.AppCap, error) {
	raw, err := os.ReadFile(fmt.Sprintf("%s/%d/cmdline", r.ProcRoot, pid))
	if err != nil {
		return nil, err
	}
	root := rootFS{dir: fmt.Sprintf("%s/%d/root", r.ProcRoot, pid)}
	argv := splitCmdline(raw)
	how := "its command line (/proc/PID/cmdline)"
	if t := bytes.TrimRight(raw, "\x00"); !bytes.Contains(t, []byte{0}) && bytes.Contains(t, []byte{' '}) {
		cg, err := os.ReadFile(fmt.Sprintf("%s/%d/cgroup", r.ProcRoot, pid))
		if err != nil {
			return nil, err
		}
		unit := unitOf(cg)
		if unit == "" {
			return nil, fmt.Errorf("its command line is rewritten into a title (%q) and it runs in no systemd service: the configuration file is unknown", string(t))
		}
		w, from, err := execStart(root, unit)
		if err != nil {
			return nil, err
		}
		argv, how = w, fmt.Sprintf("ExecStart of %s (%s)", unit, from)
	}
	var soft int64
	if p.NofileSoft != nil {
		soft = *p.NofileSoft
	}
	v, src, files, err := redisMaxclients(root, argv, soft)
	if err != nil {
		return nil, err
	}
	c := &snapshot.AppCap{Pid: pid, App: "redis", Setting: "maxclients", Value: v, Source: src, Per: snapshot.CapPerListener}
	conf := "none (defaults)"
	if len(files) > 0 {
		conf = files[0]
	}
	c.Related = append(c.Related, snapshot.AppSetting{Name: "config", Value: conf, Source: how})
	return c, nil
}

// postgres reads max_connections of the postmaster pid.
func (r Reader) postgres(pid int) (*snapshot.AppCap, error) {
	argv, err := r.cmdline(pid)
	if err != nil {
		return nil, err
	}
	if len(argv) > 0 && strings.HasSuffix(argv[0], ":") {
		return nil, fmt.Errorf("not a postmaster (%q)", strings.Join(argv, " "))
	}
	pc, err := readPostgres(rootFS{dir: fmt.Sprintf("%s/%d/root", r.ProcRoot, pid)}, argv)
	if err != nil {
		return nil, err
	}
	c := &snapshot.AppCap{Pid: pid, App: "postgresql", Setting: "max_connections", Value: pc.maxN, Source: pc.max.source,
		Reserved: pc.resN, Per: snapshot.CapPerListener}
	c.Related = append(c.Related,
		snapshot.AppSetting{Name: "config", Value: pc.files[0], Source: "its command line (/proc/PID/cmdline: -D or config_file)"},
		snapshot.AppSetting{Name: "superuser_reserved_connections", Value: pc.reserved.value, Source: pc.reserved.source})
	return c, nil
}

// one wraps a reader's single cap.
func one(c *snapshot.AppCap, err error) ([]*snapshot.AppCap, error) {
	if err != nil {
		return nil, err
	}
	return []*snapshot.AppCap{c}, nil
}

// memcached reads memcached's -c from its command line.
func (r Reader) memcached(pid int) (*snapshot.AppCap, error) {
	argv, err := r.cmdline(pid)
	if err != nil {
		return nil, err
	}
	n, src, err := memcachedConns(argv)
	if err != nil {
		return nil, err
	}
	return &snapshot.AppCap{Pid: pid, App: "memcached", Setting: "-c", Value: n, Source: src, Per: snapshot.CapPerListener}, nil
}

// haproxy reads the global maxconn and each frontend's from the files
// haproxy's -f options name; a frontend without one is left out (haproxy
// derives it), and so is the global one when not set.
func (r Reader) haproxy(pid int) ([]*snapshot.AppCap, error) {
	argv, err := r.cmdline(pid)
	if err != nil {
		return nil, err
	}
	files, err := cleanPaths(haproxyFiles(argv))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no -f on the command line: the configuration is unknown")
	}
	hc, err := parseHAProxy(rootFS{dir: fmt.Sprintf("%s/%d/root", r.ProcRoot, pid)}, files)
	if err != nil {
		return nil, err
	}
	cfg := snapshot.AppSetting{Name: "config", Value: strings.Join(hc.files, ", "), Source: "its -f (/proc/PID/cmdline)"}
	var out []*snapshot.AppCap
	add := func(setting string, s *setting, ports []uint16) error {
		n, err := strconv.ParseInt(s.value, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: maxconn %q is not a positive number", s.source, s.value)
		}
		out = append(out, &snapshot.AppCap{Pid: pid, App: "haproxy", Setting: setting, Value: n, Source: s.source,
			Per: snapshot.CapPerListener, Ports: ports, Related: []snapshot.AppSetting{cfg}})
		return nil
	}
	if hc.global != nil {
		if err := add("maxconn", hc.global, nil); err != nil {
			return nil, err
		}
	}
	for _, fe := range hc.frontends {
		if fe.maxconn != nil && len(fe.ports) > 0 {
			if err := add(fmt.Sprintf("maxconn (frontend %s)", fe.name), fe.maxconn, fe.ports); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// tomcat reads each Connector's maxConnections from CATALINA_BASE's
// conf/server.xml (the java command line's -Dcatalina.base); a Connector
// with maxConnections -1 has no limit and is left out.
func (r Reader) tomcat(pid int, base string) ([]*snapshot.AppCap, error) {
	if !strings.HasPrefix(base, "/") {
		return nil, fmt.Errorf("catalina.base %q is relative to a working directory that may have changed", base)
	}
	file := path.Join(base, "conf", "server.xml")
	b, err := readFile(rootFS{dir: fmt.Sprintf("%s/%d/root", r.ProcRoot, pid)}, file)
	if err != nil {
		return nil, err
	}
	cs, err := parseTomcat(b, file)
	if err != nil {
		return nil, err
	}
	var out []*snapshot.AppCap
	for _, c := range cs {
		if c.unlimited {
			continue
		}
		n, err := strconv.ParseInt(c.maxConnections.value, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: maxConnections %q is not a positive number", c.maxConnections.source, c.maxConnections.value)
		}
		out = append(out, &snapshot.AppCap{Pid: pid, App: "tomcat", Setting: fmt.Sprintf("maxConnections (Connector port %d)", c.port), Value: n,
			Source: c.maxConnections.source, Per: snapshot.CapPerListener, Ports: []uint16{c.port},
			Related: []snapshot.AppSetting{
				{Name: "config", Value: file, Source: "-Dcatalina.base on its command line (/proc/PID/cmdline)"},
				{Name: "maxThreads", Value: c.maxThreads.value, Source: c.maxThreads.source},
				{Name: "acceptCount", Value: c.acceptCount.value, Source: c.acceptCount.source},
			}})
	}
	return out, nil
}

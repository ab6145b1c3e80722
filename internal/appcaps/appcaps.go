// SPDX-License-Identifier: Apache-2.0

// Package appcaps reads the connection limits servers set for themselves
// (nginx worker_connections, ...) from their own configuration, as the
// process sees it: its command line from /proc/PID/cmdline and its files
// through /proc/PID/root, so a server in a container is read from the
// container's files. It only reads: it never runs a server's binary and
// never connects to it.
package appcaps

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Reader reads the caps of the processes that own listeners.
type Reader struct {
	// ProcRoot is "/proc" in production.
	ProcRoot string
	// Budget is the collection's (NewBudget): every Fill of one
	// collection shares it, its deadline included. Nil: each Fill has
	// a CollectionLimits budget of its own.
	Budget *Budget
}

// nginxDefaultConf is where Debian's nginx (and nginx.org's packages)
// look without -c: --conf-path of the build.
const nginxDefaultConf = "/etc/nginx/nginx.conf"

// server is one listener owner to read, with what Fill knows of it.
type server struct {
	pid     int
	command string
	soft    *int64
}

// served is what reading one server gave.
type served struct {
	srv  server
	caps []*snapshot.AppCap
	err  error
	skip bool
}

// Fill adds the caps of the servers owning s's listeners to s.AppCaps and
// records the servers whose configuration could not be read as
// appcaps errors (the rule then names the plateau without the setting).
// It returns by the budget's deadline whatever the files do: a server
// not read by then is recorded as unknown with that reason, and the
// reading left behind stops at its next step.
func (r Reader) Fill(s *snapshot.Snapshot) {
	coll := r.Budget
	if coll == nil {
		coll = NewBudget(CollectionLimits(), time.Now())
	}
	owners := listenerOwners(s)
	cmds := map[int]string{}
	var todo []server
	for _, pid := range owners {
		if p := s.Procs[pid]; p != nil {
			cmds[pid] = p.Command
			if isServer(p.Command) {
				todo = append(todo, server{pid: pid, command: p.Command, soft: p.NofileSoft})
			}
		}
	}
	if len(todo) == 0 {
		s.AppCaps = []snapshot.AppCap{}
		return
	}
	// The reading runs on its own, sharing nothing with s.
	out := make(chan served, len(todo))
	go func() {
		for _, srv := range todo {
			out <- r.read(srv, owners, cmds, coll)
		}
	}()
	timer := time.NewTimer(time.Until(coll.Deadline()))
	defer timer.Stop()
	caps := []snapshot.AppCap{}
wait:
	for i := range todo {
		select {
		case got := <-out:
			if got.skip {
				continue
			}
			if got.err != nil {
				s.AddError(snapshot.SourceAppCaps, fmt.Errorf("%s pid %d: %w", got.srv.command, got.srv.pid, got.err))
				if !errors.As(got.err, new(*partial)) {
					continue
				}
			}
			for _, c := range got.caps {
				c.Command = got.srv.command
				caps = append(caps, *c)
			}
		case <-timer.C:
			coll.stop()
			for _, srv := range todo[i:] {
				s.AddError(snapshot.SourceAppCaps, fmt.Errorf("%s pid %d: limit unknown: its configuration was not read by the application-limit step's deadline (%v)",
					srv.command, srv.pid, coll.lim.Time))
			}
			break wait
		}
	}
	s.AppCaps = caps
}

// isServer says whether command is one whose limits Fill reads.
func isServer(command string) bool {
	switch command {
	case "nginx", "redis-server", "postgres", "postmaster", "memcached", "java", "envoy", "haproxy":
		return true
	}
	return false
}

// read reads the caps of one server; skip is set for a process that is
// not a server to read (a worker, a java that is not Tomcat).
func (r Reader) read(srv server, owners []int, cmds map[int]string, coll *Budget) served {
	pid := srv.pid
	skip := served{srv: srv, skip: true}
	if err := coll.check(); err != nil {
		return served{srv: srv, err: err}
	}
	b := coll.child(ServerLimits(), time.Now())
	who, err := credOf(r.ProcRoot, pid)
	if err != nil {
		return served{srv: srv, err: err}
	}
	var got []*snapshot.AppCap
	fsys := budgetFS{FS: rootFS{dir: fmt.Sprintf("%s/%d/root", r.ProcRoot, pid), who: who}, b: b}
	switch srv.command {
	case "nginx":
		argv, rerr := r.cmdline(pid)
		if rerr != nil || !strings.HasPrefix(strings.Join(argv, " "), "nginx: master process") {
			return skip // gone since the owner scan, or a worker: read with its master
		}
		got, err = one(r.nginx(fsys, pid, argv, owners))
	case "redis-server":
		got, err = one(r.redis(fsys, pid, srv.soft))
	case "postgres", "postmaster":
		got, err = one(r.postgres(fsys, pid))
	case "memcached":
		got, err = one(r.memcached(pid))
	case "java":
		argv, rerr := r.cmdline(pid)
		if rerr != nil || catalinaBase(argv) == "" {
			return skip // not Tomcat
		}
		got, err = r.tomcat(fsys, pid, catalinaBase(argv))
	case "envoy":
		got, err = r.envoy(fsys, pid)
	case "haproxy":
		if pp, perr := r.ppid(pid); perr == nil && slices.Contains(owners, pp) && cmds[pp] == "haproxy" {
			return skip // a worker of a master that owns listeners too: read with it
		}
		got, err = r.haproxy(fsys, pid)
	}
	return served{srv: srv, caps: got, err: err}
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
func (r Reader) nginx(fsys budgetFS, pid int, argv []string, owners []int) (*snapshot.AppCap, error) {
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
	nc, err := parseNginx(fsys, conf)
	if err != nil {
		return nil, fmt.Errorf("config %s (%s): %w", conf, how, err)
	}
	if a.globals != "" {
		{
			g := &nginxReader{fsys: fsys, prefix: path.Dir(conf), conf: nc}
			if err := g.block("command line -g", newNginxLexer([]byte(a.globals)), nil, 0); err == nil {
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
			return nil, fmt.Errorf("%s: worker_connections %q is not a positive number", s.source, frag(s.value))
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
func (r Reader) redis(root budgetFS, pid int, nofileSoft *int64) (*snapshot.AppCap, error) {
	raw, err := os.ReadFile(fmt.Sprintf("%s/%d/cmdline", r.ProcRoot, pid))
	if err != nil {
		return nil, err
	}
	argv := splitCmdline(raw)
	how := "its command line (/proc/PID/cmdline)"
	if t := bytes.TrimRight(raw, "\x00"); !bytes.Contains(t, []byte{0}) && bytes.Contains(t, []byte{' '}) {
		cg, err := os.ReadFile(fmt.Sprintf("%s/%d/cgroup", r.ProcRoot, pid))
		if err != nil {
			return nil, err
		}
		unit := unitOf(cg)
		if unit == "" {
			return nil, fmt.Errorf("its command line is rewritten into a title (%q) and it runs in no systemd service: the configuration file is unknown", frag(string(t)))
		}
		w, from, err := execStart(root, unit)
		if err != nil {
			return nil, err
		}
		argv, how = w, fmt.Sprintf("ExecStart of %s (%s)", unit, from)
	}
	var soft int64
	if nofileSoft != nil {
		soft = *nofileSoft
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
func (r Reader) postgres(fsys budgetFS, pid int) (*snapshot.AppCap, error) {
	argv, err := r.cmdline(pid)
	if err != nil {
		return nil, err
	}
	if len(argv) > 0 && strings.HasSuffix(argv[0], ":") {
		return nil, fmt.Errorf("not a postmaster (%q)", frag(strings.Join(argv, " ")))
	}
	pc, err := readPostgres(fsys, argv)
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

// partial is an error that leaves the caps read so far good: what was
// left out is counted in it.
type partial struct{ err error }

func (p *partial) Error() string { return p.err.Error() }
func (p *partial) Unwrap() error { return p.err }

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
	t, tsrc := memcachedThreads(argv)
	res := min(memcachedReserved(t), n)
	return &snapshot.AppCap{Pid: pid, App: "memcached", Setting: "-c", Value: n, Reserved: res, Source: src, Per: snapshot.CapPerListener,
		Related: []snapshot.AppSetting{{Name: "-t", Value: fmt.Sprint(t), Source: tsrc}}}, nil
}

// haproxy reads the global maxconn and each frontend's from the files
// haproxy's -f options name; a frontend without one is left out (haproxy
// derives it), and so is the global one when not set.
func (r Reader) haproxy(fsys budgetFS, pid int) ([]*snapshot.AppCap, error) {
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
	hc, err := parseHAProxy(fsys, files)
	if err != nil {
		return nil, err
	}
	cfg := snapshot.AppSetting{Name: "config", Value: strings.Join(hc.files, ", "), Source: "its -f (/proc/PID/cmdline)"}
	var out []*snapshot.AppCap
	add := func(setting string, s *setting, ports []uint16) error {
		n, err := strconv.ParseInt(s.value, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: maxconn %q is not a positive number", s.source, frag(s.value))
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
	named := 0
	for _, fe := range hc.frontends {
		if fe.maxconn != nil && len(fe.ports) > 0 {
			if named++; named > maxNamed {
				continue
			}
			if err := add(fmt.Sprintf("maxconn (frontend %s)", fe.name), fe.maxconn, fe.ports); err != nil {
				return nil, err
			}
		}
	}
	if named > maxNamed {
		return out, &partial{leftOut("frontends", named)}
	}
	return out, nil
}

// tomcat reads each Connector's maxConnections from CATALINA_BASE's
// conf/server.xml (the java command line's -Dcatalina.base); a Connector
// with maxConnections -1 has no limit and is left out.
func (r Reader) tomcat(fsys budgetFS, pid int, base string) ([]*snapshot.AppCap, error) {
	if !strings.HasPrefix(base, "/") {
		return nil, fmt.Errorf("catalina.base %q is relative to a working directory that may have changed", frag(base))
	}
	file := path.Join(base, "conf", "server.xml")
	b, err := readFile(fsys, file)
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
			return nil, fmt.Errorf("%s: maxConnections %q is not a positive number", c.maxConnections.source, frag(c.maxConnections.value))
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

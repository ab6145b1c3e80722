// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// NginxConnections is the fix for nginx at worker_connections: the new
// value per worker (worker_connections counts every connection a worker
// holds: clients, upstreams and its listeners), the file limit it then
// needs, and what it costs. file is where the setting is.
func NginxConnections(value int64, file string, nofile int64) []diag.Fix {
	return []diag.Fix{
		{Scope: "application", Target: "nginx",
			Text:    fmt.Sprintf("raise worker_connections to %d in the events block of %s and reload nginx", value, file),
			Command: fmt.Sprintf("events { worker_connections %d; }  then: nginx -t && nginx -s reload", value),
			Risk:    "each connection costs nginx memory: its connection and event structures, client_header_buffer_size (1k) per client and, while proxying, proxy_buffer_size and proxy_buffers (8 x 4k or 8k) per request; size the host for that many at once"},
		{Scope: "application", Target: "nginx-nofile",
			Text:    fmt.Sprintf("let each worker open that many descriptors: worker_rlimit_nofile %d at the top level of %s (each connection is a descriptor; files and logs need more)", nofile, file),
			Command: fmt.Sprintf("worker_rlimit_nofile %d;", nofile),
			Risk:    "capped by the hard limit of the master and by fs.nr_open"},
		{Scope: "kernel", Target: "systemd",
			Text:    fmt.Sprintf("raise the service's own limit to match, so the master may grant it: LimitNOFILE=%d", nofile),
			Command: fmt.Sprintf("systemctl edit nginx  ->  [Service] LimitNOFILE=%d ; systemctl restart nginx", nofile),
			Risk:    "kernel memory per open file"},
	}
}

// AppCap is the fix for a server at a connection limit tcpdoctor reads
// but has no ecosystem advice for: the setting and the new value.
func AppCap(app, setting string, value int64, where string) diag.Fix {
	return diag.Fix{Scope: "application", Target: app,
		Text:    fmt.Sprintf("raise %s's %s to %d (%s)", app, setting, value, where),
		Command: fmt.Sprintf("%s %d", setting, value),
		Risk:    "each connection costs the server memory, and a descriptor: its file limit must follow"}
}

// RedisMaxclients is the fix for Redis at maxclients: the new value in
// its configuration file and the open-file limit Redis needs for it
// (maxclients + 32, which Redis asks for itself at start and lowers
// maxclients to when refused).
func RedisMaxclients(value int64, file string) []diag.Fix {
	nofile := value + 32
	return []diag.Fix{
		{Scope: "application", Target: "redis",
			Text:    fmt.Sprintf("raise maxclients to %d in %s (CONFIG SET maxclients %d applies it at once, within the open-file limit)", value, file, value),
			Command: fmt.Sprintf("maxclients %d", value),
			Risk:    "each client costs Redis its buffers (query buffer, output buffer up to client-output-buffer-limit); a client that opens a connection per request is better fixed with a pool"},
		{Scope: "kernel", Target: "systemd",
			Text:    fmt.Sprintf("give Redis the descriptors for them: LimitNOFILE=%d (maxclients + 32)", nofile),
			Command: fmt.Sprintf("systemctl edit redis-server  ->  [Service] LimitNOFILE=%d ; systemctl restart redis-server", nofile),
			Risk:    "kernel memory per open file"},
	}
}

// PostgresMaxConnections is the fix for PostgreSQL at max_connections:
// a pooler first (each connection is a backend process), then the
// setting; clients is how many it held.
func PostgresMaxConnections(value int64, file string, clients int, usable int64, pooler string) []diag.Fix {
	raise := diag.Fix{Scope: "application", Target: "postgresql",
		Text:    fmt.Sprintf("raise max_connections to %d in %s and restart PostgreSQL", value, file),
		Command: fmt.Sprintf("ALTER SYSTEM SET max_connections = %d;  then restart (%s)", value, PostgresRestart(file)),
		Risk:    "each connection is a backend process with its own memory (work_mem per sort or hash, temp_buffers); shared memory for locks grows with it: size the host for it"}
	// A pool's server connections come out of the same slots: never more
	// than the ordinary clients' share, less one for an administrator.
	pool := max(min(20, usable-1), 1)
	if pooler != "" {
		// The holder is a pooler already: no second one in front; its
		// pool must fit the server's slots.
		return []diag.Fix{{Scope: "application", Target: pooler,
			Text:    fmt.Sprintf("%s holds these connections: its pool is sized to the server's %d slots for ordinary clients, so the clients wait in %s, not here; if they wait too long, raise max_connections (below) and then %s's pool, keeping the pool (default_pool_size x databases and users, capped by max_db_connections) at most the slots less one for an administrator", pooler, usable, pooler, pooler),
			Command: fmt.Sprintf("pgbouncer.ini: max_db_connections = %d  (at most max_connections - superuser_reserved_connections - 1)", max(usable-1, 1)),
			Risk:    "a pool larger than the server's slots has its extra connections refused (\"sorry, too many clients already\")"}, raise}
	}
	return []diag.Fix{
		{Scope: "application", Target: "pooler",
			Text:    fmt.Sprintf("put a connection pooler in front (PgBouncer in transaction mode): the %d clients share a few server connections instead of a backend process each; its pool at most %d, the server's %d slots for ordinary clients less one for an administrator", clients, pool, usable),
			Command: fmt.Sprintf("pgbouncer: pool_mode = transaction, default_pool_size = %d, max_db_connections = %d, max_client_conn = %d", pool, pool, value),
			Risk:    "session state (prepared statements, SET, advisory locks) does not carry across transactions in transaction mode"},
		raise,
	}
}

// PostgresRestart is how to restart the cluster whose configuration is
// file: pg_ctlcluster for a cluster made by pg_createcluster (Debian's,
// its configuration in /etc/postgresql/VERSION/NAME/), else pg_ctl on
// the data directory (initdb's keeps postgresql.conf there), or the
// service manager that runs it.
func PostgresRestart(file string) string {
	if rest, ok := strings.CutPrefix(file, "/etc/postgresql/"); ok {
		if parts := strings.Split(rest, "/"); len(parts) >= 3 && parts[0] != "" && parts[1] != "" {
			return fmt.Sprintf("pg_ctlcluster %s %s restart", parts[0], parts[1])
		}
	}
	dir := "DATADIR"
	if i := strings.LastIndexByte(file, '/'); i > 0 {
		dir = file[:i]
	}
	return fmt.Sprintf("pg_ctl -D %s restart, or through the service manager that runs it", dir)
}

// HAProxyMaxconn is the fix for haproxy at maxconn: the global one, or
// frontend's when that is the limit reached ("" for the global one).
func HAProxyMaxconn(value int64, file, frontend string) []diag.Fix {
	where := "in the global section"
	if frontend != "" {
		where = fmt.Sprintf("in frontend %s (and the global maxconn at least as high)", frontend)
	}
	return []diag.Fix{{Scope: "application", Target: "haproxy",
		Text:    fmt.Sprintf("raise maxconn to %d %s of %s and reload haproxy", value, where, file),
		Command: fmt.Sprintf("maxconn %d", value),
		Risk:    "each connection holds up to two buffers (tune.bufsize, 16 kB by default) and two descriptors; haproxy raises its own open-file limit from the global maxconn, within the service's LimitNOFILE"}}
}

// MemcachedConns is the fix for memcached at its -c.
func MemcachedConns(value int64) []diag.Fix {
	return []diag.Fix{{Scope: "application", Target: "memcached",
		Text:    fmt.Sprintf("raise memcached's connection limit to %d (-c in /etc/memcached.conf on Debian) and restart it", value),
		Command: fmt.Sprintf("-c %d", value),
		Risk:    fmt.Sprintf("a descriptor and a read buffer per connection; memcached sets its own open-file limit to -c when it starts, which it can only raise above the hard limit LimitNOFILE gives as root: keep LimitNOFILE at %d or above", value)}}
}

// TomcatMaxConnections is the fix for a Tomcat Connector at
// maxConnections: the new value on the Connector of port.
func TomcatMaxConnections(value int64, file string, port uint16) []diag.Fix {
	return []diag.Fix{{Scope: "application", Target: "tomcat",
		Text:    fmt.Sprintf("raise maxConnections to %d on the Connector of port %d in %s and restart Tomcat (Spring Boot: server.tomcat.max-connections=%d); requests beyond maxThreads wait inside those connections", value, port, file, value),
		Command: fmt.Sprintf(`<Connector port="%d" ... maxConnections="%d"/>`, port, value),
		Risk:    "a descriptor and buffers per connection; the service's LimitNOFILE must be above it"}}
}

// MeasuredCap is the fix for a server whose connection limit no file
// tcpdoctor reads names, by its command: where such servers set it, and
// the new value worked out from what was measured (held, the plateau;
// value, at least double it and enough for wanted, the connections that
// wanted it at once; basis, when set, says how value was sized from the
// clients seen). The current setting was not read, so none is claimed.
func MeasuredCap(command string, held int, value int64, wanted, basis string) []diag.Fix {
	measured := fmt.Sprintf("it stopped at %d connections (measured; its setting was not read); %s wanted it at once", held, wanted)
	if basis != "" {
		measured += fmt.Sprintf("; %d: %s", value, basis)
	}
	f := diag.Fix{Scope: "application", Target: command,
		Risk: "each connection (or the worker serving it) costs memory and a descriptor: size the host and the open-file limit (LimitNOFILE=) for the new value"}
	switch command {
	case "apache2", "httpd", "apache":
		f.Target = "apache2"
		f.Text = fmt.Sprintf("%s: raise MaxRequestWorkers to %d in the enabled MPM's file (Debian: /etc/apache2/mods-enabled/mpm_event.conf, mpm_worker.conf or mpm_prefork.conf; `apache2ctl -V` names the MPM), with ServerLimit at least %d / ThreadsPerChild for event and worker (their defaults 16 x 25 = 400) or at least %d for prefork (default 256), then restart apache2 (a ServerLimit change needs a full restart)", measured, value, value, value)
		f.Command = fmt.Sprintf("MaxRequestWorkers %d", value)
		f.Risk = "each worker is a thread (event, worker) or a process (prefork) with its memory: prefork at that many processes needs the RAM for them; with the event MPM, ListenBacklog and the accept queue only make clients wait longer"
	case "node", "nodejs":
		f.Text = fmt.Sprintf("%s: Node's cap is server.maxConnections set in the program's code (or a proxy or framework limit in front of it); raise it to %d or remove it", measured, value)
		f.Command = fmt.Sprintf("server.maxConnections = %d", value)
	case "gunicorn":
		f.Text = fmt.Sprintf("%s: gunicorn serves --workers x --threads requests at once (sync workers: one each; async workers: --worker-connections each); make that at least %d", measured, value)
	case "uwsgi":
		f.Text = fmt.Sprintf("%s: uWSGI serves processes x threads requests at once; make that at least %d (and its listen backlog, --listen, follows)", measured, value)
	case "php-fpm", "php-fpm8.2", "php-fpm8.3":
		f.Text = fmt.Sprintf("%s: PHP-FPM serves pm.max_children requests at once per pool; raise it to %d in the pool's file", measured, value)
		f.Command = fmt.Sprintf("pm.max_children = %d", value)
	case "java":
		f.Text = fmt.Sprintf("%s: a Java server's cap is its connector's: Tomcat maxConnections and maxThreads (Spring Boot server.tomcat.max-connections, server.tomcat.threads.max), Jetty's thread pool and connection limit, Netty's own; raise it to %d", measured, value)
	case "python", "python3":
		f.Text = fmt.Sprintf("%s: a Python server's cap is in its code or its server's options (a thread or process pool's max_workers, a semaphore, uvicorn --limit-concurrency, gunicorn --workers x --threads); raise it to %d", measured, value)
	default:
		f.Text = fmt.Sprintf("%s: %s caps its own connections or workers (its configuration or code); raise that limit to %d", measured, command, value)
	}
	return []diag.Fix{f}
}

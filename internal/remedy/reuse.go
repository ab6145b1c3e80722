// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Protocol is what a destination port speaks, as far as reuse advice
// needs: each keeps connections open its own way.
type Protocol int

// The protocols reuse advice tells apart.
const (
	Generic Protocol = iota
	HTTP
	SMTP
	PostgreSQL
	MySQL
	Redis
	Memcached
	MongoDB
)

// ProtocolOf guesses a destination's protocol from its port: the
// well-known and conventional ports of each (SMTP 25, 465, 587 and the
// test port 2525; PostgreSQL 5432 and PgBouncer's 6432; MySQL 3306;
// Redis 6379; memcached 11211; MongoDB 27017; HTTP 80, 443 and the
// common alternates 8000, 8008, 8080, 8081, 8443, 8888, 3000, 5000,
// 9000, 9200). Any other port is Generic.
func ProtocolOf(port uint16) Protocol {
	switch port {
	case 25, 465, 587, 2525:
		return SMTP
	case 5432, 6432:
		return PostgreSQL
	case 3306:
		return MySQL
	case 6379:
		return Redis
	case 11211:
		return Memcached
	case 27017:
		return MongoDB
	case 80, 443, 8000, 8008, 8080, 8081, 8443, 8888, 3000, 5000, 9000, 9200:
		return HTTP
	}
	return Generic
}

// Reuse is the first fix for connection churn: keep connections open and
// reuse them, in the words of the destination's protocol (ProtocolOf its
// port): an SMTP client is told to keep its session, a database client
// to pool, an HTTP client keep-alive with a pool; another port the
// generic advice. cmd is the opener's command, service where it
// connects (invalid when unknown), pool the pool size to ask for (at
// least the concurrency seen).
func Reuse(cmd string, service netip.AddrPort, pool int) diag.Fix {
	dst := "the service"
	if service.IsValid() {
		dst = service.String()
	}
	proto := Generic
	if service.IsValid() {
		proto = ProtocolOf(service.Port())
	}
	f := diag.Fix{Scope: "application", Target: "connection-pool",
		Risk: "pooled connections must be health-checked and evicted when idle, or they fail when the peer closes them"}
	switch proto {
	case SMTP:
		f.Text = fmt.Sprintf("reuse SMTP sessions to %s instead of opening one per request (per mail): keep the session open and send several mails on it, RSET between mails after a failed one, QUIT only when the queue is empty; with up to %d sessions open at once (Python: one smtplib.SMTP for many send_message calls; JavaMail: connect the Transport once and call sendMessage for each mail; Postfix as the client: smtp_connection_cache_destinations; PHPMailer: SMTPKeepAlive = true)", dst, pool)
		f.Risk = "servers end idle sessions (often after 300 s) and may cap mails per session; reconnect when the server says 421"
		switch {
		case strings.HasPrefix(cmd, "python"):
			f.Target = "python"
			f.Command = fmt.Sprintf("s = smtplib.SMTP(%q, %d)\nfor msg in mails: s.send_message(msg)\ns.quit()", service.Addr().String(), service.Port())
		case strings.HasPrefix(cmd, "java"):
			f.Target = "java"
			f.Command = "Transport t = session.getTransport(\"smtp\"); t.connect(); for (Message m : mails) t.sendMessage(m, m.getAllRecipients()); t.close();"
		}
	case PostgreSQL, MySQL, MongoDB:
		f.Text = fmt.Sprintf("reuse database connections to %s instead of opening one per request: a connection pool of at least %d in the client (%s), or a pooler in front of the server", dst, pool, dbPools(proto, pool))
		f.Risk = "a pool holds its connections against the server's own limit (max_connections, max_connections in MySQL): the pools of every client together must stay below it; a pool's connections must be checked and recycled before the server or a firewall drops them"
		switch {
		case strings.HasPrefix(cmd, "python"):
			f.Target = "python"
			f.Command = map[Protocol]string{
				PostgreSQL: fmt.Sprintf("pool = psycopg_pool.ConnectionPool(conninfo, max_size=%d)  /  SQLAlchemy create_engine(url, pool_size=%d)", pool, pool),
				MySQL:      fmt.Sprintf("SQLAlchemy create_engine(url, pool_size=%d)  /  mysql.connector.pooling.MySQLConnectionPool(pool_size=%d)", pool, pool),
				MongoDB:    fmt.Sprintf("one MongoClient(url, maxPoolSize=%d) for the whole process", pool),
			}[proto]
		case strings.HasPrefix(cmd, "java"):
			f.Target = "java"
			f.Command = fmt.Sprintf("HikariConfig.setMaximumPoolSize(%d); one HikariDataSource for the whole application", pool)
		}
	case Redis:
		f.Text = fmt.Sprintf("reuse Redis connections to %s instead of opening one per request: one pooled client for the whole process with at least %d connections (JedisPool, Lettuce's shared connection, redis-py ConnectionPool(max_connections=%d), go-redis PoolSize = %d)", dst, pool, pool, pool)
		switch {
		case strings.HasPrefix(cmd, "python"):
			f.Target = "python"
			f.Command = fmt.Sprintf("pool = redis.ConnectionPool(max_connections=%d); r = redis.Redis(connection_pool=pool)", pool)
		case strings.HasPrefix(cmd, "redis-benchmark"):
			f.Target = "redis"
			f.Command = "redis-benchmark -k 1 (keep-alive, the default); -k 0 measures a new connection per request"
		default:
			f.Target = "client"
		}
	case Memcached:
		f.Text = fmt.Sprintf("reuse memcached connections to %s instead of opening one per request: one client object kept for the whole process with at least %d connections (pymemcache PooledClient(max_pool_size=%d), spymemcached/Xmemcached's connection pool, libmemcached's memcached_pool)", dst, pool, pool)
	case HTTP:
		f.Text = fmt.Sprintf("reuse connections to %s instead of opening one per request: HTTP keep-alive with a pool of at least %d (Java: Apache HttpClient PoolingHttpClientConnectionManager setDefaultMaxPerRoute(%d), OkHttp ConnectionPool(%d, 5, MINUTES); Go: one shared http.Client with Transport.MaxIdleConnsPerHost = %d (the default 2 closes the rest) and every response body read to EOF and closed; Python: requests.Session with HTTPAdapter(pool_maxsize=%d); Node: an http.Agent with keepAlive: true)",
			dst, pool, pool, pool, pool, pool)
		switch {
		case strings.HasPrefix(cmd, "java"):
			f.Target = "java"
			f.Command = fmt.Sprintf("one shared client with a pool of %d: PoolingHttpClientConnectionManager.setDefaultMaxPerRoute(%d) / new ConnectionPool(%d, 5, TimeUnit.MINUTES)", pool, pool, pool)
		case strings.HasPrefix(cmd, "python"):
			f.Target = "python"
			f.Command = fmt.Sprintf("s = requests.Session(); s.mount('http://', HTTPAdapter(pool_maxsize=%d))", pool)
		case strings.HasPrefix(cmd, "node"):
			f.Target = "client"
			f.Command = fmt.Sprintf("new http.Agent({ keepAlive: true, maxSockets: %d })", pool)
		}
	default:
		f.Text = fmt.Sprintf("reuse connections to %s instead of opening one per request: keep each connection open for many requests, with a pool of at least %d in the client library (its keep-alive or pool setting); a protocol that allows one request per connection needs the server to allow several", dst, pool)
	}
	// nginx as the opener is a proxy: its upstream block keeps the pool
	// (HTTP only; the stream module has none).
	if strings.HasPrefix(cmd, "nginx") && (proto == HTTP || proto == Generic) {
		f.Target = "nginx"
		f.Text = fmt.Sprintf("nginx opens a new upstream connection per request unless the upstream block keeps a pool: keepalive %d (at least the concurrent upstream requests) with HTTP/1.1 and the Connection header cleared", pool)
		f.Command = fmt.Sprintf("upstream backend { server %s; keepalive %d; }  location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; }", dst, pool)
		f.Risk = "each worker keeps up to that many idle connections; the upstream must allow keep-alive (keepalive_requests, keepalive_timeout above nginx's)"
	}
	return f
}

// dbPools names the client pools of a database protocol.
func dbPools(p Protocol, pool int) string {
	switch p {
	case PostgreSQL:
		return fmt.Sprintf("HikariCP maximumPoolSize = %d; Go database/sql SetMaxIdleConns(%d) with SetMaxOpenConns; psycopg_pool max_size = %d; node-postgres Pool max: %d; PgBouncer in front for many processes", pool, pool, pool, pool)
	case MySQL:
		return fmt.Sprintf("HikariCP maximumPoolSize = %d; Go database/sql SetMaxIdleConns(%d) with SetMaxOpenConns; SQLAlchemy pool_size = %d; ProxySQL in front for many processes", pool, pool, pool)
	}
	return fmt.Sprintf("one MongoClient per process with maxPoolSize = %d", pool)
}

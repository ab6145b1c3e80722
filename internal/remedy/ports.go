// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// KeepBelow is the share of the usable range that fixes aim to keep each
// destination under: the warning threshold of port-exhaustion.
const KeepBelow = 0.7

// Spread computes how many destination ports, destination addresses or
// source addresses keep each 4-tuple space below KeepBelow.
func Spread(peak, usable int) diag.Fix {
	k := max(2, ceilDiv(peak, int(float64(usable)*KeepBelow)))
	return diag.Fix{Scope: "application", Target: "topology",
		Text:    fmt.Sprintf("each (source, destination, port) has its own %d ports; this destination needs about %d -> spread over %d destination ports or addresses (e.g. the backend listening on %d ports, or %d backend IPs), or %d source addresses", usable, peak, k, k, k, k),
		Command: "setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1); bind(fd, {src_i, port 0}); connect(fd, dst)  (nginx: proxy_bind $src sets it itself)",
		Risk:    "bind() to a source address without IP_BIND_ADDRESS_NO_PORT picks the port at bind time for every destination at once, and exhausts the range sooner"}
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// WidenRange computes an ip_local_port_range that keeps peak below
// KeepBelow, and the listener ports it must then reserve; false when the
// range is already as wide as it can be.
func WidenRange(p *tcpmodel.PortSpace, peak int) (diag.Fix, bool) {
	need := int(float64(peak)/KeepBelow+0.5) + p.NReserved
	hi := max(p.Hi, 65535)
	lo := min(p.Lo, max(1024, hi-need+1))
	if lo == p.Lo && hi == p.Hi {
		return diag.Fix{}, false
	}
	f := diag.Fix{Scope: "kernel", Target: "sysctl",
		Text: fmt.Sprintf("widen the ephemeral range from %d ports to %d", p.Size(), hi-lo+1),
		Risk: "a port in the range can be taken by an outgoing connection before a service binds it: reserve the ports services listen on (ip_local_reserved_ports); per network namespace"}
	if hi-lo+1-p.NReserved < need-p.NReserved {
		f.Text += fmt.Sprintf(" (still short of the %d needed: spread destinations too)", need-p.NReserved)
	}
	// The range is the host's (p): lo and hi only widen it.
	sets := []diag.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: fmt.Sprintf("%d %d", lo, hi), Limit: diag.LimitWiden, Host: fmt.Sprintf("%d %d", p.Lo, p.Hi)}}
	var res []string
	for port := range p.Listen {
		if int(port) >= lo && int(port) <= hi && !p.IsReserved(int(port)) {
			res = append(res, fmt.Sprint(port))
		}
	}
	if len(res) > 0 {
		sort.Slice(res, func(i, j int) bool { return len(res[i]) < len(res[j]) || len(res[i]) == len(res[j]) && res[i] < res[j] })
		for _, r := range p.Reserved {
			if r[0] == r[1] {
				res = append(res, fmt.Sprint(r[0]))
			} else {
				res = append(res, fmt.Sprintf("%d-%d", r[0], r[1]))
			}
		}
		sets = append(sets, Setting("net.ipv4.ip_local_reserved_ports", strings.Join(res, ",")))
	}
	f = SetSysctls(f, "", sets...)
	f.Command += "  (persist in /etc/sysctl.d/)"
	return f, true
}

// TWReuse proposes tcp_tw_reuse=1 when reuse does not apply to the
// destination now; false when it already does or cannot (no timestamps).
func TWReuse(r tcpmodel.Reuse, applies bool) (diag.Fix, bool) {
	if applies || r.Mode == 1 && r.Timestamps {
		return diag.Fix{}, false
	}
	now := "unknown"
	if r.Mode >= 0 {
		now = fmt.Sprint(r.Mode)
		if r.Mode == 2 {
			now = "2, loopback only"
		}
	}
	f := diag.Fix{Scope: "kernel", Target: "sysctl",
		Text: fmt.Sprintf("let connect() take over a port held by TIME_WAIT to the same destination once it is %s old (now tcp_tw_reuse=%s); helps outgoing connections only", r.Delay, now),
		Risk: "needs TCP timestamps on both ends (net.ipv4.tcp_timestamps=1); does nothing for connections the peer opened; tcp_tw_recycle is gone since Linux 4.12 and tcp_fin_timeout does not shorten TIME_WAIT"}
	sets := []diag.Sysctl{Setting("net.ipv4.tcp_tw_reuse", "1")}
	if !r.Timestamps {
		sets = []diag.Sysctl{Setting("net.ipv4.tcp_timestamps", "1"), sets[0]}
	}
	return SetSysctls(f, "", sets...), true
}

// Linger is the last resort against TIME_WAIT: abortive close.
func Linger() diag.Fix {
	return diag.Fix{Scope: "application", Target: "so_linger",
		Text:    "last resort: close with SO_LINGER {on, 0} sends RST instead of FIN, so no TIME_WAIT is left (tcp_fin_timeout does not help: TIME_WAIT is a fixed 60 s)",
		Command: "socket.setSoLinger(true, 0)  /  setsockopt(fd, SOL_SOCKET, SO_LINGER, {1, 0})",
		Risk:    "unsent and in-flight data is discarded and the peer sees \"connection reset\"; counted as TcpExt.TCPAbortOnClose / TCPAbortOnData; late segments of the old connection can reach a new one"}
}

// KeepAliveLimits names the settings that end a server's keep-alive
// connections, for the server cmd runs ("" or one not known here: the
// common ones).
func KeepAliveLimits(cmd string) string {
	switch cmd {
	case "nginx":
		return "nginx keepalive_requests (default 1000) and keepalive_timeout (default 75 s)"
	case "apache2", "httpd":
		return "Apache MaxKeepAliveRequests (default 100) and KeepAliveTimeout (default 5 s); its event MPM also ends keep-alive connections early while every worker thread is busy (give it more: ThreadsPerChild, MaxRequestWorkers, MinSpareThreads)"
	case "java":
		return "Tomcat maxKeepAliveRequests (default 100) and keepAliveTimeout; Jetty's idleTimeout"
	}
	return "nginx keepalive_requests (default 1000) and keepalive_timeout; Apache MaxKeepAliveRequests (default 100) and KeepAliveTimeout; Tomcat maxKeepAliveRequests (default 100)"
}

// ServerCloses says why the server cmd runs closes keep-alive
// connections first.
func ServerCloses(cmd string) string {
	switch cmd {
	case "apache2", "httpd":
		return "Connection: close after MaxKeepAliveRequests, or its event MPM closing idle keep-alive connections while every worker is busy"
	}
	return "HTTP/1.0 or Connection: close"
}

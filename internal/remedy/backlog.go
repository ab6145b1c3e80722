// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Somaxconn raises net.core.somaxconn to n and persists it; somax is
// the host's value when known (hasSomax), never lowered.
func Somaxconn(n, somax int64, hasSomax bool) diag.Fix {
	return SetSysctls(diag.Fix{
		Scope: "kernel", Target: "sysctl",
		Text: fmt.Sprintf("raise the cap on every listener's backlog to %d, and persist it", n),
		Risk: "applies at the next listen(): restart the service; set per network namespace (containers have their own); a longer queue makes clients wait in it when the application is too slow, it does not make it faster",
	}, "60-somaxconn.conf", Known("net.core.somaxconn", n, somax, hasSomax))
}

// Backlog gives the kernel and application settings that raise the
// backlog of a listener on port, owned by cmd, to n.
func Backlog(cmd string, port uint16, n, somax int64, hasSomax bool) []diag.Fix {
	var fixes []diag.Fix
	if !hasSomax || somax < n {
		fixes = append(fixes, Somaxconn(n, somax, hasSomax))
	}
	app := func(target, text, command string) {
		fixes = append(fixes, diag.Fix{Scope: "application", Target: target, Text: text, Command: command,
			Risk: "more memory per queued connection only while queued; restart needed"})
	}
	switch {
	case strings.HasPrefix(cmd, "java"):
		app("netty", "Netty: ask for the backlog on the server bootstrap", fmt.Sprintf("serverBootstrap.option(ChannelOption.SO_BACKLOG, %d)", n))
		app("tomcat", "Tomcat / Spring Boot: the accept queue is acceptCount", fmt.Sprintf(`<Connector port="%d" acceptCount="%d"/>  (Spring Boot: server.tomcat.accept-count=%d)`, port, n, n))
		app("java", "plain Java: pass the backlog to the server socket", fmt.Sprintf("new ServerSocket(%d, %d)", port, n))
	case strings.HasPrefix(cmd, "nginx"):
		app("nginx", "nginx asks for 511 by default", fmt.Sprintf("listen %d backlog=%d;", port, n))
	case strings.HasPrefix(cmd, "node"):
		app("node", "Node asks for 511 by default", fmt.Sprintf("server.listen(%d, host, %d)", port, n))
	case strings.HasPrefix(cmd, "redis"):
		app("redis", "Redis asks for tcp-backlog (511 by default)", fmt.Sprintf("tcp-backlog %d", n))
	case strings.HasPrefix(cmd, "python"):
		app("python", fmt.Sprintf("Python: socketserver and http.server listen with request_queue_size (5 by default); asyncio's create_server with backlog=100; gunicorn and uvicorn take --backlog (2048): ask for %d", n),
			fmt.Sprintf("class Server(http.server.ThreadingHTTPServer): request_queue_size = %d  /  loop.create_server(..., backlog=%d)  /  gunicorn --backlog %d", n, n, n))
	default:
		app("listen(2)", fmt.Sprintf("pass %d as the listen() backlog. Netty: option(ChannelOption.SO_BACKLOG, %d); nginx: \"listen %d backlog=%d;\"; Java: new ServerSocket(%d, %d); Tomcat: acceptCount=%d; Node: server.listen(%d, host, %d). Go's net.Listen already asks for somaxconn (read once per process)",
			n, n, port, n, port, n, n, port, n), fmt.Sprintf("listen(fd, %d)", n))
	}
	fixes = append(fixes, diag.Fix{Scope: "application", Target: "acceptor",
		Text: "accept faster: the queue fills when the process accepts slower than clients connect; keep the accept loop free of blocking work, add acceptor threads or worker processes (Netty: do not block the boss/event loop; nginx: worker_processes auto, listen ... reuseport)",
		Risk: "none for correctness; more workers use more memory"})
	return fixes
}

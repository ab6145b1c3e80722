// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// c2AppCap is case C2 round 4: a proxy stuck at a limit of its own. nginx
// (worker_connections 256, one worker) proxies long requests to a slow
// upstream for 400 clients: each client costs two connections, so about
// 127 are served and the rest closed right after being accepted; no
// kernel counter names it. The fix is the worker_connections the finding
// computes.
func c2AppCap() Scenario {
	return Scenario{
		Name:   "c2-app-cap",
		Case:   "C2",
		Title:  "proxy at its own connection limit: nginx worker_connections 256 vs the computed value",
		Expect: []string{"app-connection-cap"},
		Run:    runC2AppCap,
	}
}

// capPhase is one phase's nginx setting and what it measured.
type capPhase struct {
	label      string
	conns      int // worker_connections
	client     traffic.HoldHTTPClientResult
	held       []int // server-side ESTABLISHED on the port, once a second
	notEnough  int   // nginx error.log "worker_connections are not enough"
	nginxPid   int
	named      bool // the finding named nginx, its listener and the setting
	fixedValue int  // worker_connections the finding's fix names; 0 none
}

func runC2AppCap(ctx context.Context, o Options) (*Result, error) {
	res := &Result{}
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		return res, fmt.Errorf("lab: c2-app-cap needs nginx (Debian package nginx): %w", err)
	}
	clients, delay, hold, settle, interval := 400, 5*time.Second, 16*time.Second, 4*time.Second, 3*time.Second
	if o.Quick {
		hold, settle, interval = 11*time.Second, 3*time.Second, 2*time.Second
	}
	const port = "8080"
	tb, err := NewTestbed(ctx, o, Setup{})
	if err != nil {
		return res, err
	}
	defer tb.Close()
	t := tb.Topo
	up, err := tb.Start(t.Server, true, "slow-http-server", "--addr", "127.0.0.1:9000", "--delay", delay.String(), "--max-duration", "10m")
	if err != nil {
		return res, err
	}
	defer up.Stop()
	addr := t.ServerAddrs[0].String() + ":" + port
	phases := []*capPhase{{label: "before: worker_connections 256", conns: 256}}
	// The value app-connection-cap's nginx fix names.
	fixRE := regexp.MustCompile(`worker_connections (\d+);`)
	for i := 0; i < 2; i++ {
		ph := phases[i]
		fs, err := measureCap(ctx, tb, nginx, ph, capLoad{addr: addr, clients: clients, hold: hold, settle: settle, interval: interval})
		if err != nil {
			return res, err
		}
		for _, f := range FiredOn(fs, "app-connection-cap") {
			ph.named = ph.named || names(f, ":"+port, ph.nginxPid, "nginx") && strings.Contains(f.Summary, fmt.Sprintf("worker_connections %d", ph.conns))
			for _, x := range f.Fixes {
				if m := fixRE.FindStringSubmatch(x.Command); m != nil && ph.fixedValue == 0 {
					ph.fixedValue, _ = strconv.Atoi(m[1])
				}
			}
		}
		if i == 0 {
			res.Before = fs
			next := ph.fixedValue
			if next == 0 {
				next = 4 * ph.conns // no finding to take it from: the case is not reproduced anyway
			}
			phases = append(phases, &capPhase{label: fmt.Sprintf("after: worker_connections %d (the finding's fix)", next), conns: next})
		} else {
			res.After = fs
		}
	}
	res.Table = Table{Columns: []string{"phase", "worker_connections", "clients", "answers", "failed", "server connections on :" + port + " (min-max, once a second)", "nginx \"not enough\" lines"}}
	for _, ph := range phases {
		c := ph.client
		res.Table.Rows = append(res.Table.Rows, []string{
			ph.label, strconv.Itoa(ph.conns), strconv.Itoa(c.Clients), strconv.Itoa(c.Answers), fmtFailed(c.Failed, c.Errors),
			spread(ph.held), strconv.Itoa(ph.notEnough),
		})
	}
	b, a := phases[0], phases[1]
	improved := b.client.Failed > 0 && a.client.Failed == 0 && a.client.Answers > b.client.Answers && maxOf(a.held) > maxOf(b.held)
	Judge(res, []string{"app-connection-cap"}, improved, fmt.Sprintf("answers %d -> %d, failed %d -> %d, server connections on :%s at most %d -> %d, nginx \"not enough\" lines %d -> %d",
		b.client.Answers, a.client.Answers, b.client.Failed, a.client.Failed, port, maxOf(b.held), maxOf(a.held), b.notEnough, a.notEnough))
	if len(FiredOn(res.Before, "app-connection-cap")) > 0 && !b.named {
		res.Reproduced = false
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT reproduced: no app-connection-cap finding named nginx pid %d, listener :%s and worker_connections %d", b.nginxPid, port, b.conns))
	} else if b.named {
		res.Verdict = append(res.Verdict, fmt.Sprintf("the finding names nginx pid %d, listener :%s, worker_connections %d from its config file, and the value to set: %d", b.nginxPid, port, b.conns, b.fixedValue))
	}
	res.Notes = append(res.Notes,
		"the case's nginx had 4 workers of 20,480 worker_connections: 81,920 connections, each proxied client costing two, so 40,960 clients; here one worker of 256 holds 127 clients, their 127 upstream connections and its listener",
		"nginx accepts a connection beyond its limit and closes it at once (its error.log says \"256 worker_connections are not enough\"); the client's request then meets a closed socket and the kernel answers with a reset: no kernel limit is near, the listener's queue stays short",
		fmt.Sprintf("the upstream (slow-http-server) answers each request after %s; the %d clients send one request at a time and retry 200 ms after a failure", delay, clients),
		"the after phase sets the worker_connections the before finding's fix computed (at least double, and enough for the clients held plus those turned away in a second, two connections each)")
	if o.Quick {
		res.Notes = append(res.Notes, fmt.Sprintf("quick form: %s per phase, one sample window of %s", hold, interval))
	}
	return res, nil
}

// capLoad is one phase's load.
type capLoad struct {
	addr                   string
	clients                int
	hold, settle, interval time.Duration
}

// measureCap runs one phase: nginx with the phase's worker_connections in
// the server namespace, the clients from the client namespace, a check of
// the server namespace and the connections on the port once a second.
func measureCap(ctx context.Context, tb *Testbed, nginx string, ph *capPhase, ld capLoad) ([]diag.Finding, error) {
	t := tb.Topo
	dir, err := os.MkdirTemp("", "tcpdoctor-lab-nginx-")
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer os.RemoveAll(dir)
	// nginx's workers (nobody) create their temp directories in it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	body := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections %[2]d; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen %[3]s;
        location / { proxy_pass http://127.0.0.1:9000; proxy_read_timeout 60s; }
    }
}
`, dir, ph.conns, ld.addr)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	ngx, err := tb.StartProgram(t.Server, nginx, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	if err != nil {
		return nil, err
	}
	defer ngx.Stop()
	ph.nginxPid = ngx.Pid
	_, port, _ := strings.Cut(ld.addr, ":")
	for end := time.Now().Add(10 * time.Second); nsCountSockets(ctx, t.Server, "state", "listening", "sport", "=", ":"+port) < 1; {
		if time.Now().After(end) || ngx.Exited() {
			return nil, fmt.Errorf("lab: nginx does not listen on %s", ld.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Logf("%s: %d clients to %s (nginx pid %d)", ph.label, ld.clients, ld.addr, ngx.Pid)
	t0 := time.Now()
	cli, err := tb.Start(t.Client, false, "hold-http-client", "--addr", ld.addr, "--clients", strconv.Itoa(ld.clients),
		"--duration", ld.hold.String(), "--max-duration", (ld.hold + 30*time.Second).String())
	if err != nil {
		return nil, err
	}
	// The connections on the port once a second while the load lasts.
	stop := make(chan struct{})
	sampled := make(chan []int, 1)
	go func() {
		var held []int
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				sampled <- held
				return
			case <-tick.C:
				if time.Since(t0) > ld.settle/2 {
					held = append(held, nsCountSockets(ctx, t.Server, "state", "established", "sport", "=", ":"+port))
				}
			}
		}
	}()
	if err := window.Sleep(ctx, ld.settle); err != nil {
		close(stop)
		return nil, err
	}
	rep, err := tb.Check(ctx, ld.interval, t.Server)
	if err != nil {
		close(stop)
		return nil, err
	}
	if err := window.Sleep(ctx, time.Until(t0.Add(ld.hold-time.Second))); err != nil {
		close(stop)
		return nil, err
	}
	close(stop)
	ph.held = <-sampled
	if err := cli.Wait(ld.hold+30*time.Second, &ph.client); err != nil {
		return nil, err
	}
	ngx.Stop()
	b, err := os.ReadFile(filepath.Join(dir, "error.log"))
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	ph.notEnough = strings.Count(string(b), "worker_connections are not enough")
	return rep.Findings, nil
}

// spread prints the smallest and largest of vs: "126-127".
func spread(vs []int) string {
	if len(vs) == 0 {
		return "-"
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func maxOf(vs []int) int {
	m := 0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

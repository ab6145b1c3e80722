// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// c2AcceptBacklog is case C2 round 2: a connection storm against a slow
// acceptor whose accept queue is 128 (listen 128, somaxconn 128), then the
// same storm with both raised to 4096.
func c2AcceptBacklog() Scenario {
	return Scenario{
		Name:   "c2-accept-backlog",
		Case:   "C2",
		Title:  "connection storm against a slow acceptor: backlog 128 vs 4096",
		Expect: []string{"listen-overflow"},
		Run:    runC2AcceptBacklog,
	}
}

// stormPhase is one storm's settings and what it measured.
type stormPhase struct {
	label            string
	backlog, somax   int
	sendQ            string // effective backlog as ss -lnt shows it
	server           traffic.StormServerResult
	client           traffic.StormClientResult
	overflows, drops int64
	established      int  // server-side ESTABLISHED on the port near the end (accepted + queued)
	pid              int  // the storm server's pid
	named            bool // the expected finding named the right listener
}

func runC2AcceptBacklog(ctx context.Context, o Options) (*Result, error) {
	// Full: 5000 connects at 1000/s against 300 accepts/s; with 4096 the
	// queue peaks near 3500 (85%), below the rule's 90% mark.
	count, rate, accept, hold := 5000, 1000.0, 300.0, 12*time.Second
	settle, interval := time.Second, 3*time.Second
	if o.Quick {
		count, rate, accept, hold = 1500, 500.0, 150.0, 6*time.Second
		settle, interval = 500*time.Millisecond, 2*time.Second
	}
	const port = "7001"
	res := &Result{}
	tb, err := NewTestbed(ctx, o, Setup{})
	if err != nil {
		return res, err
	}
	defer tb.Close()
	addr := tb.Topo.ServerAddrs[0].String() + ":" + port
	phases := []*stormPhase{
		{label: "before: backlog 128", backlog: 128, somax: 128},
		{label: "after: backlog 4096", backlog: 4096, somax: 4096},
	}
	for i, ph := range phases {
		fs, err := measureStorm(ctx, tb, ph, stormLoad{addr: addr, count: count, rate: rate, accept: accept, hold: hold, settle: settle, interval: interval})
		if err != nil {
			return res, err
		}
		for _, f := range FiredOn(fs, "listen-overflow") {
			ph.named = ph.named || names(f, ":"+port, ph.pid, "storm-server")
		}
		if i == 0 {
			res.Before = fs
		} else {
			res.After = fs
		}
	}
	res.Table = Table{Columns: []string{"phase", "listen()", "somaxconn", "Send-Q", "accepts/s", "attempted", "client connected", "failed", "server established", "accepted", "slow (>=1s)", "p50 connect", "p99 connect", "ListenOverflows", "ListenDrops"}}
	for _, ph := range phases {
		c := ph.client
		res.Table.Rows = append(res.Table.Rows, []string{
			ph.label, strconv.Itoa(ph.backlog), strconv.Itoa(ph.somax), ph.sendQ, fmt.Sprintf("%.0f", accept),
			strconv.Itoa(c.Attempted), strconv.Itoa(c.Connected), fmtFailed(c.Failed, c.Errors), strconv.Itoa(ph.established), strconv.Itoa(ph.server.Accepted),
			strconv.Itoa(c.SlowConnects), fmtMs(c.ConnectTime.P50Ms), fmtMs(c.ConnectTime.P99Ms),
			fmt.Sprintf("+%d", ph.overflows), fmt.Sprintf("+%d", ph.drops),
		})
	}
	b, a := phases[0], phases[1]
	improved := a.established > b.established && a.client.Failed <= b.client.Failed && a.client.SlowConnects < b.client.SlowConnects && a.overflows == 0 && b.overflows > 0
	Judge(res, []string{"listen-overflow"}, improved, fmt.Sprintf("server established %d -> %d, client connected %d -> %d of %d, failed %d -> %d, slow connects %d -> %d, ListenOverflows +%d -> +%d, p99 connect %s -> %s",
		b.established, a.established, b.client.Connected, a.client.Connected, count, b.client.Failed, a.client.Failed, b.client.SlowConnects, a.client.SlowConnects, b.overflows, a.overflows, fmtMs(b.client.ConnectTime.P99Ms), fmtMs(a.client.ConnectTime.P99Ms)))
	if len(FiredOn(res.Before, "listen-overflow")) > 0 && !b.named {
		res.Reproduced = false
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT reproduced: no listen-overflow finding named listener :%s, storm-server pid %d", port, b.pid))
	} else if b.named {
		res.Verdict = append(res.Verdict, fmt.Sprintf("the finding names listener :%s and storm-server pid %d", port, b.pid))
	}
	res.Notes = append(res.Notes,
		"the case's server asked for 128 in code (SO_BACKLOG) under somaxconn 128; here the before phase sets both to 128 in the server namespace, the fix raises both to 4096 (the listener must listen again to get it)",
		"tcp_abort_on_overflow is 0, so the kernel drops SYNs to a full queue: clients retransmit after 1 s, 2 s... (slow connects) and fail at the 5 s connect timeout; the case saw the same as a stuck connection count",
		"'client connected' is the client's view (handshake done, counted once the SYN-ACK came back); the server may have dropped the final ACK of such a handshake (an overflow) and hold only a SYN-RECV request, so 'server established' (ESTABLISHED on the port a second before the clients let go: accepted plus queued) is what the case counted; 'accepted' is what the slow acceptor took off the queue by the end",
		"before the fix, 'accepted' can exceed 'server established': some connections the server accepted were gone (no CLOSE_WAIT left on the port) by the end; why was not pinned down here (candidates: handshakes completed on SYN cookies or late SYN-ACK retransmissions to clients that had given up)",
		"the full storm also fills the SYN queue (the same backlog caps it) and SYN cookies are sent, so syn-queue-overflow and retransmissions (SYN-ACK retransmits) may fire beside listen-overflow before the fix; they are real consequences of the same storm and quiet after it")
	if o.Quick {
		res.Notes = append(res.Notes, fmt.Sprintf("quick form: %d connects at %.0f/s, hold %s, one sample window of %s", count, rate, hold, interval))
	}
	return res, nil
}

// stormLoad is one storm: count connects at rate per second to addr,
// held for hold, against a server accepting accept per second; the check
// starts settle after the first connect and lasts interval.
type stormLoad struct {
	addr                   string
	count                  int
	rate, accept           float64
	hold, settle, interval time.Duration
}

// measureStorm runs one storm phase: somaxconn and a storm server with the
// phase's backlog, the storm client from the client namespace, a check of
// the server namespace during the storm, and the counters around it.
func measureStorm(ctx context.Context, tb *Testbed, ph *stormPhase, ld stormLoad) ([]diag.Finding, error) {
	addr, count, rate, accept := ld.addr, ld.count, ld.rate, ld.accept
	hold, settle, interval := ld.hold, ld.settle, ld.interval
	t := tb.Topo
	if err := nsSysctl(t.Server, "net/core/somaxconn", strconv.Itoa(ph.somax)); err != nil {
		return nil, err
	}
	c0, err := nsCounters(t.Server)
	if err != nil {
		return nil, err
	}
	srv, err := tb.Start(t.Server, true, "storm-server", "--addr", addr, "--backlog", strconv.Itoa(ph.backlog),
		"--accept-rate", fmt.Sprint(accept), "--max-duration", (hold + 30*time.Second).String())
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	ph.pid = srv.Pid
	ph.sendQ = listenSendQ(ctx, t.Server, addr)
	tb.Logf("%s: %d connects at %.0f/s to %s (storm-server pid %d, Send-Q %s)", ph.label, count, rate, addr, srv.Pid, ph.sendQ)
	t0 := time.Now()
	cli, err := tb.Start(t.Client, false, "storm-client", "--addr", addr, "--count", strconv.Itoa(count),
		"--rate", fmt.Sprint(rate), "--duration", hold.String(), "--max-duration", (hold + 30*time.Second).String())
	if err != nil {
		return nil, err
	}
	if err := window.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	rep, err := tb.Check(ctx, interval, t.Server)
	if err != nil {
		return nil, err
	}
	// Count the server's connections a second before the clients let go.
	if err := window.Sleep(ctx, time.Until(t0.Add(hold-time.Second))); err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	ph.established = nsCountSockets(ctx, t.Server, "state", "established", "sport", "=", ":"+port)
	if err := cli.Wait(hold+20*time.Second, &ph.client); err != nil {
		return nil, err
	}
	c1, err := nsCounters(t.Server)
	if err != nil {
		return nil, err
	}
	ph.overflows = c1["TcpExt.ListenOverflows"] - c0["TcpExt.ListenOverflows"]
	ph.drops = c1["TcpExt.ListenDrops"] - c0["TcpExt.ListenDrops"]
	srv.Stop()
	if err := srv.Wait(5*time.Second, &ph.server); err != nil {
		return nil, err
	}
	return rep.Findings, nil
}

// Helpers shared by the c2-*, c4-time-wait and healthy scenarios.

// nsSysctl writes /proc/sys/KEY (slash form) inside namespace ns.
func nsSysctl(ns, key, value string) error {
	return topo.Do(ns, func() error { return topo.WriteSysctl(key, value) })
}

// nsCounters reads the netns's /proc/net/{netstat,snmp} counters
// ("TcpExt.ListenOverflows") and sockstat ("TCP.tw") from inside it.
func nsCounters(ns string) (map[string]int64, error) {
	m := map[string]int64{}
	err := topo.Do(ns, func() error {
		for _, name := range []string{"netstat", "snmp", "sockstat"} {
			// thread-self: /proc/self/net is the main thread's netns.
			b, err := os.ReadFile(filepath.Join("/proc/thread-self/net", name))
			if err != nil {
				return fmt.Errorf("lab: %w", err)
			}
			parse := procnet.ParseNetstat
			if name == "sockstat" {
				parse = procnet.ParseSockstat
			}
			if err := parse(bytes.NewReader(b), m); err != nil {
				return fmt.Errorf("lab: %s in %s: %w", name, ns, err)
			}
		}
		return nil
	})
	return m, err
}

// listenSendQ is the Send-Q (effective backlog) `ss -lnt` shows for the
// listener on addr, "?" when it cannot be read.
func listenSendQ(ctx context.Context, ns, addr string) string {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "ss", "-Hlnt", "src", addr).Output()
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return "?"
	}
	return f[2]
}

// nsCountSockets counts the TCP sockets `ss -Htn FILTER...` lists in
// namespace ns; -1 when ss fails.
func nsCountSockets(ctx context.Context, ns string, filter ...string) int {
	args := append([]string{"netns", "exec", ns, "ss", "-Htn"}, filter...)
	out, err := exec.CommandContext(ctx, "ip", args...).Output()
	if err != nil {
		return -1
	}
	return bytes.Count(out, []byte("\n"))
}

// names reports whether finding f names a local address ending in port,
// and the process pid with command comm.
func names(f diag.Finding, port string, pid int, comm string) bool {
	return strings.HasSuffix(f.Subject.Local.String(), port) && f.Subject.Pid == pid && f.Subject.Command == comm
}

func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// fmtFailed prints a failure count with its errors: "12 (ETIMEDOUT 12)".
func fmtFailed(n int, errs map[string]int) string {
	if n == 0 {
		return "0"
	}
	var parts []string
	for _, k := range sortedKeys(errs) {
		parts = append(parts, fmt.Sprintf("%s %d", k, errs[k]))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

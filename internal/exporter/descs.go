// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// netstatCounter is one /proc/net/netstat or /proc/net/snmp counter the
// rules read (or that explains their fixes), exported as a counter.
type netstatCounter struct {
	key  string // snapshot.Snapshot.Counters key
	help string
}

// netstatCounters is the allow-list, in output order. The metric name is
// derived: "TcpExt.ListenOverflows" -> tcpdoctor_tcpext_listen_overflows_total.
func netstatCounters() []netstatCounter {
	return []netstatCounter{
		{"TcpExt.ListenOverflows", "Connections refused because a listener's accept queue was full (listen-overflow)."},
		{"TcpExt.ListenDrops", "SYNs and handshakes dropped at a listener, overflows included (listen-overflow)."},
		{"TcpExt.TCPReqQFullDrop", "SYNs dropped because the SYN queue was full and syncookies were off (syn-queue-overflow)."},
		{"TcpExt.TCPReqQFullDoCookies", "SYNs answered with a syncookie because the SYN queue was full (syn-queue-overflow)."},
		{"TcpExt.SyncookiesSent", "Syncookies sent (syn-queue-overflow)."},
		{"TcpExt.SyncookiesFailed", "Syncookies that failed validation (syn-queue-overflow)."},
		{"TcpExt.TCPTimeWaitOverflow", "Sockets closed without TIME_WAIT because tcp_max_tw_buckets was reached (time-wait-churn)."},
		{"TcpExt.TCPAbortOnClose", "Connections reset on close with unread data, or by SO_LINGER 0 (time-wait-churn)."},
		{"TcpExt.TCPAbortOnData", "Connections reset because data arrived after close (time-wait-churn)."},
		{"TcpExt.TCPLostRetransmit", "Retransmissions that were lost again (retransmissions)."},
		{"TcpExt.TCPTimeouts", "Retransmission timeouts (retransmissions)."},
		{"TcpExt.TCPSynRetrans", "SYN and SYN-ACK retransmissions (retransmissions)."},
		{"TcpExt.TCPToZeroWindowAdv", "Times this host as receiver advertised a zero window (rwnd-limited)."},
		{"TcpExt.TCPWantZeroWindowAdv", "Times this host as receiver wanted to advertise a zero window (rwnd-limited)."},
		{"TcpExt.TCPFromZeroWindowAdv", "Times this host as receiver reopened a zero window (rwnd-limited)."},
		{"TcpExt.TCPZeroWindowDrop", "Segments dropped because the receive window was zero (rwnd-limited)."},
		{"Tcp.ActiveOpens", "Connections opened by connect() (time-wait-churn, port-exhaustion)."},
		{"Tcp.PassiveOpens", "Connections accepted from listeners."},
		{"Tcp.AttemptFails", "Connection attempts that failed."},
		{"Tcp.OutSegs", "Segments sent (retransmissions)."},
		{"Tcp.RetransSegs", "Segments retransmitted (retransmissions)."},
	}
}

// counterName turns "TcpExt.TCPTimeWaitOverflow" into
// "tcpdoctor_tcpext_tcp_time_wait_overflow_total".
func counterName(key string) string {
	group, name, _ := strings.Cut(key, ".")
	var sb strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prevLower := unicode.IsLower(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || (unicode.IsUpper(rs[i-1]) && nextLower) {
				sb.WriteByte('_')
			}
		}
		sb.WriteRune(unicode.ToLower(r))
	}
	return "tcpdoctor_" + strings.ToLower(group) + "_" + sb.String() + "_total"
}

// descs are the metric families.
type descs struct {
	counters map[string]*prometheus.Desc
	order    []*prometheus.Desc

	sockets, sockSeen, timeWait       *prometheus.Desc
	queueLen, queueMax                *prometheus.Desc
	listenerConns, appLimit, appHeld  *prometheus.Desc
	portsInUse, portsUsable           *prometheus.Desc
	limiter, window, finding, unknown *prometheus.Desc
	sourceUp, sourceDur               *prometheus.Desc
	collectDur, diagDur, collections  *prometheus.Desc
	lastCollect                       *prometheus.Desc

	evDrops, evOverflow, evResets *prometheus.Desc
	evRetrans, evSynRetrans       *prometheus.Desc
	evConnects, evFailed          *prometheus.Desc
}

func newDescs() *descs {
	d := &descs{counters: map[string]*prometheus.Desc{}}
	nd := func(name, help string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc(name, help, labels, nil)
		d.order = append(d.order, desc)
		return desc
	}
	for _, c := range netstatCounters() {
		src := "/proc/net/netstat "
		if strings.HasPrefix(c.key, "Tcp.") {
			src = "/proc/net/snmp "
		}
		d.counters[c.key] = nd(counterName(c.key), c.help+" Source: "+src+c.key+".", subjectLabels()...)
	}
	d.sockets = nd("tcpdoctor_sockets", "TCP sockets by state, from the sock_diag dump.", subjectLabels("state")...)
	d.sockSeen = nd("tcpdoctor_collection_sockets", "TCP sockets seen by the last collection.", subjectLabels()...)
	d.timeWait = nd("tcpdoctor_time_wait_sockets", "Sockets in TIME_WAIT (/proc/net/sockstat TCP tw).", subjectLabels()...)
	d.queueLen = nd("tcpdoctor_accept_queue_length", "Connections waiting in a listener's accept queue (ss -lnt Recv-Q), top listeners by fill.", subjectLabels("local", "port", "command")...)
	d.queueMax = nd("tcpdoctor_accept_queue_max_length", "A listener's effective backlog, min(backlog, somaxconn) (ss -lnt Send-Q), top listeners by fill.", subjectLabels("local", "port", "command")...)
	d.listenerConns = nd("tcpdoctor_listener_connections", "Connections accepted on a listener that a process holds now (sock_diag, owners from /proc/PID/fd), top listeners by count: a server stuck at a limit of its own shows a plateau here (app-connection-cap).", subjectLabels("local", "port", "command")...)
	d.appLimit = nd("tcpdoctor_app_connection_limit", "A server's own connection limit as its configuration sets it, what ordinary clients can have (app-connection-cap: nginx worker_connections per worker, Redis maxclients, PostgreSQL max_connections less the reserved ones); pid is the process whose configuration it is.", subjectLabels("command", "pid", "setting")...)
	d.appHeld = nd("tcpdoctor_app_connections", "Connections counted against that limit now: every connection of nginx's busiest worker, the connections accepted on the listeners of Redis or PostgreSQL.", subjectLabels("command", "pid", "setting")...)
	d.portsInUse = nd("tcpdoctor_ephemeral_ports_in_use", "Ephemeral ports held towards one destination: open sockets plus TIME_WAIT ones connect() cannot reuse yet (tcp_tw_reuse), top destinations.", subjectLabels("src", "dst")...)
	d.portsUsable = nd("tcpdoctor_ephemeral_ports_usable", "Ephemeral ports connect() can use per destination: ip_local_port_range minus reserved ports and ports bound by listeners or bind().", subjectLabels()...)
	d.limiter = nd("tcpdoctor_connections_by_limiter", "Established connections by what limited them over the last window: app (busy under half of it), else the largest tcp_info chronograph: cwnd, rwnd or sndbuf.", subjectLabels("limiter")...)
	d.window = nd("tcpdoctor_window_seconds", "Length of the window between the two samples the rules saw.", subjectLabels()...)
	d.finding = nd("tcpdoctor_finding", "1 for each active finding of the rules (as tcpdoctor check reports them).", subjectLabels("rule", "severity", "local", "remote", "pid", "command", "peer_pod", "peer_namespace")...)
	d.unknown = nd("tcpdoctor_rule_unknown", "1 for each rule that could not decide in a namespace (missing inputs): unknown, not healthy.", subjectLabels("rule")...)
	d.sourceUp = nd("tcpdoctor_source_up", "1 if the source answered fully in the last collection, 0 if it failed or was partial.", subjectLabels("source")...)
	d.sourceDur = nd("tcpdoctor_source_duration_seconds", "Time the source took in the last collection.", subjectLabels("source")...)
	d.collectDur = nd("tcpdoctor_collection_duration_seconds", "Time the last collection took (every source, every namespace).")
	d.diagDur = nd("tcpdoctor_diagnosis_duration_seconds", "Time the last diagnosis and metric preparation took.")
	d.collections = nd("tcpdoctor_collections_total", "Collections completed since start.")
	d.evDrops = nd("tcpdoctor_bpf_drops_total", "Packets the kernel dropped, by its drop reason (eBPF tp_btf/kfree_skb; QUEUE_PURGE and NOT_SPECIFIED, freed on every close, not counted). Absent when the program did not run.", subjectLabels("reason")...)
	d.evOverflow = nd("tcpdoctor_bpf_listen_overflow_drops_total", "Handshakes a listener dropped because its accept queue was full (kfree_skb TCP_LISTEN_OVERFLOW with the listener), first Top listeners, the rest under listener=\"other\".", subjectLabels("listener")...)
	d.evResets = nd("tcpdoctor_bpf_resets_total", "TCP resets sent and received (eBPF tp_btf/tcp_send_reset, tcp_receive_reset); reason is the kernel's sk_rst_reason for sent ones (TCP_STATE: close() with SO_LINGER 0), empty for received.", subjectLabels("direction", "reason")...)
	d.evRetrans = nd("tcpdoctor_bpf_retransmits_total", "Data segments retransmitted, connections closed between collections included (eBPF tp_btf/tcp_retransmit_skb).", subjectLabels()...)
	d.evSynRetrans = nd("tcpdoctor_bpf_syn_retransmits_total", "SYNs retransmitted because nobody answered (the client side of a full accept queue), first Top destinations, the rest under dst=\"other\".", subjectLabels("dst")...)
	d.evConnects = nd("tcpdoctor_bpf_connects_total", "connect() calls, failed ones included (eBPF tp_btf/inet_sock_set_state CLOSE->SYN_SENT).", subjectLabels()...)
	d.evFailed = nd("tcpdoctor_bpf_failed_connects_total", "connect() calls that never became a connection, by cause: errno EADDRNOTAVAIL (no free ephemeral port), ECONNREFUSED (a reset answered: nothing listens), ETIMEDOUT (SYNs unanswered), unreachable (EHOSTUNREACH, ENETUNREACH or another error), or abandoned (the process closed it first); first Top destinations per errno, the rest under dst=\"other\".", subjectLabels("errno", "dst")...)
	d.lastCollect = nd("tcpdoctor_last_collection_timestamp_seconds", "When the newest snapshot was taken, Unix time.")
	return d
}

func (d *descs) all() []*prometheus.Desc { return d.order }

// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Connection lifecycle counters from tp_btf/inet_sock_set_state.
 *
 * Counted in a hash map keyed by (netns, pid, peer, family), read and
 * emptied by user space each interval; nothing is sent per event. The
 * command is in the value: that of the thread that made the entry (or,
 * for peer closes and lifetimes, of the opener), so a process's threads
 * of other names, or a process that execs, count under the command its
 * entry began the interval with. A shorter key hashes faster, and comm is
 * read when an entry is made rather than at every connect (with
 * track_lifetimes, also at every connect for the opener's storage).
 *   opens          CLOSE->SYN_SENT: connect(), in the caller's context
 *   failed_*       SYN_SENT->CLOSE: a connect() that never became a
 *                  connection, told apart by what the kernel left on the
 *                  socket (sk_err, and segs_out: whether a SYN left):
 *     failed_ports   sk_err 0 and no segment sent: connect() failed
 *                    before its SYN, for want of a free ephemeral port or,
 *                    for a socket bound first, because its address and
 *                    port already reach that destination (EADDRNOTAVAIL),
 *                    in the caller's context
 *     refused        sk_err ECONNREFUSED: a reset answered the SYN
 *     timed_out      sk_err ETIMEDOUT: no answer to the SYN retransmits
 *                    (or sk_err taken, below)
 *     unreachable    sk_err EHOSTUNREACH/ENETUNREACH (an ICMP error) or
 *                    any other error the kernel set
 *     abandoned      sk_err 0 after the SYN left: the process closed
 *                    the socket before the handshake finished (its own
 *                    connect timeout), in its own context
 *                  refused, timed_out and unreachable end in softirq or
 *                  timer context: counted under pid 0 (the opener is
 *                  unknown) unless track_lifetimes stored it at open
 *                  A reader of SO_ERROR can take the error first:
 *                  getsockopt(SO_ERROR) clears sk_err (xchg, without the
 *                  socket lock), and the kernel sets sk_err, purges the
 *                  write queue, then closes (tcp_done_with_error). A
 *                  process waiting in poll or epoll is woken only after
 *                  the close; one that reads SO_ERROR without waiting
 *                  can race it, and so can a woken one on kernels
 *                  without commit 853c3bd7b791 ("tcp: fix race in
 *                  tcp_write_err()"), where a timeout wakes pollers
 *                  before the close. A timeout is still told apart: the
 *                  retransmit timer is no longer pending and the queue
 *                  is purged (a process's own close comes with its SYN
 *                  queued and the timer set), and its error was
 *                  sk_err_soft or ETIMEDOUT. A reset or ICMP error taken
 *                  that way counts as abandoned, under whatever task the
 *                  packet interrupted
 *   active_closes  ESTABLISHED->FIN_WAIT1: close()/shutdown() of a
 *                  connection whose peer had not closed, in the closer's
 *                  context (it will hold the TIME_WAIT). Sockets that
 *                  called connect() count under (pid, peer); accepted
 *                  ones under (pid, local port) with no peer, so a
 *                  server's many clients make one entry
 *   peer_closes    ESTABLISHED->CLOSE_WAIT of a connection this program saw
 *                  opened (with track_lifetimes)
 *   lifetime_*     SYN_SENT to CLOSE of connections seen opened (with
 *                  track_lifetimes)
 * Every failed connect also goes to the ring buffer of events shared with
 * events.c, its reason the errno (0 when abandoned).
 * peer_closes and lifetimes need the opener's key at transitions that run
 * in softirq context: with track_lifetimes set at load, a connection seen
 * opened carries its key and start time in socket local storage (freed
 * with the socket). That join costs about as much as the counting itself,
 * so it is off unless asked for.
 *
 * An accepted socket is a copy of its listener and keeps the listener's
 * sk_max_ack_backlog; a socket that called connect() has 0 there. That
 * tells a server's active close from a client's without any storage.
 */

#include "vmlinux.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_SK_STORAGE 24
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1
#define BPF_SK_STORAGE_GET_F_CREATE 1
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

enum {
	TCP_ESTABLISHED = 1,
	TCP_SYN_SENT = 2,
	TCP_FIN_WAIT1 = 4,
	TCP_CLOSE = 7,
	TCP_CLOSE_WAIT = 8,
};

#define ENETUNREACH 101
#define ETIMEDOUT 110
#define ECONNREFUSED 111
#define EADDRNOTAVAIL 99

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_get_current_comm)(void *buf, __u32 size_of_buf) = (void *)16;
static struct task_struct___lc *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static void *(*bpf_sk_storage_get)(void *map, void *sk, void *value, __u64 flags) = (void *)107;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static __u64 (*bpf_ringbuf_query)(void *ringbuf, __u64 flags) = (void *)134;

/* Set by the loader before loading; the verifier drops the code it
 * guards when 0. */
const volatile __u32 track_lifetimes = 0;
/* Set by the loader where the kernel has bpf_get_current_task_btf (Linux
 * 5.11): pid and comm are then read from the task itself rather than
 * through the two helpers (TestCost's run-time statistics compare both;
 * docs/performance.md: with comm read only when an entry is made, they
 * cost the same). */
const volatile __u32 task_btf = 0;
/* Failed connects also go to the shared ring buffer (events_shared.h). */
const volatile __u64 wakeup_bytes = 64 * 1024;

#include "events_shared.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
/* The kernel's task_struct (the ___lc flavour keeps the name local). */
struct task_struct___lc {
	int tgid;
	char comm[16];
};
/* What the retransmit timer leaves on a connect it gives up on. */
struct sock___lc {
	int sk_err_soft;
};
struct inet_connection_sock___lc {
	__u8 icsk_pending;
};
struct tcp_sock___lc {
	__u32 packets_out;
};
#pragma clang attribute pop

struct flow_key {
	__u32 netns;
	__u32 pid;
	__u8 daddr[16];
	__u16 dport; /* host order; 0 for accepted connections */
	__u16 lport; /* accepted connections: the listening port; else 0 */
	__u16 family;
	__u16 pad;
};

struct flow_counts {
	__u64 opens;
	__u64 failed_ports;
	__u64 active_closes;
	__u64 peer_closes;
	__u64 lifetime_ns;
	__u64 lifetimes;
	__u64 refused;
	__u64 timed_out;
	__u64 unreachable;
	__u64 abandoned;
	__u8 comm[16]; /* the task's when the entry was made */
};

struct open_conn {
	__u64 start_ns; /* 0 once closed */
	struct flow_key key;
	__u8 comm[16]; /* the opener's */
};

/* Overflow counters: index 0 flows map full, 1 socket storage not
 * allocated. */
#define OVERFLOW_FLOWS 0
#define OVERFLOW_CONNS 1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, struct flow_counts);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct open_conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} overflow SEC(".maps");

/* Referenced so bpf2go can generate Go types for them. */
const struct flow_key *unused_key __attribute__((unused));
const struct flow_counts *unused_counts __attribute__((unused));

static void count_overflow(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&overflow, &i);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* The current task's command: up to the NUL, zeros after it (as
 * bpf_get_current_comm), so that one command reads as one string. */
static void current_comm(__u8 *comm)
{
	if (task_btf) {
		struct task_struct___lc *t = bpf_get_current_task_btf();
		int end = 0;
#pragma unroll
		for (int i = 0; i < 16; i++) {
			char c = end ? 0 : t->comm[i];
			end |= c == 0;
			comm[i] = c;
		}
	} else {
		bpf_get_current_comm(comm, 16);
	}
}

/* The counts of k, made (with comm, or the current task's when comm is
 * 0) if absent; 0 when the map is full. */
static struct flow_counts *counts_for(struct flow_key *k, const __u8 *comm)
{
	struct flow_counts *c = bpf_map_lookup_elem(&flows, k);
	if (c)
		return c;
	struct flow_counts zero = {};
	if (comm)
		__builtin_memcpy(zero.comm, comm, 16);
	else
		current_comm(zero.comm);
	if (bpf_map_update_elem(&flows, k, &zero, BPF_NOEXIST) != 0) {
		/* -EEXIST: another CPU made it; anything else: full */
		c = bpf_map_lookup_elem(&flows, k);
		if (!c)
			count_overflow(OVERFLOW_FLOWS);
		return c;
	}
	return bpf_map_lookup_elem(&flows, k);
}

static void fill_key(struct flow_key *k, struct sock *sk, __u16 family)
{
	k->netns = sk->__sk_common.skc_net.net->ns.inum;
	if (task_btf)
		k->pid = bpf_get_current_task_btf()->tgid;
	else
		k->pid = bpf_get_current_pid_tgid() >> 32;
	k->family = family;
	__be16 dport = sk->__sk_common.skc_dport;
	k->dport = (__u16)((dport >> 8) | (dport << 8));
	if (family == AF_INET) {
		__be32 d = sk->__sk_common.skc_daddr;
		__builtin_memcpy(k->daddr, &d, 4);
	} else {
		struct in6_addr d6 = sk->__sk_common.skc_v6_daddr;
		__builtin_memcpy(k->daddr, &d6, 16);
	}
}

SEC("tp_btf/inet_sock_set_state")
int lifecycle(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int oldstate = (int)ctx[1];
	int newstate = (int)ctx[2];

	/* The transitions counted; every other one returns here without
	 * reading the socket (without track_lifetimes, two of a connection's
	 * eight or so state changes get past this). */
	int open = oldstate == TCP_CLOSE && newstate == TCP_SYN_SENT;
	int active = oldstate == TCP_ESTABLISHED && newstate == TCP_FIN_WAIT1;
	int passive = oldstate == TCP_ESTABLISHED && newstate == TCP_CLOSE_WAIT;
	int failed = oldstate == TCP_SYN_SENT && newstate == TCP_CLOSE;
	if (!open && !active && !failed && (!track_lifetimes || (!passive && newstate != TCP_CLOSE)))
		return 0;
	if (!sk || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	__u16 family = sk->__sk_common.skc_family;
	if (family != AF_INET && family != AF_INET6)
		return 0;

	if (open) {
		struct flow_key k = {};
		fill_key(&k, sk, family);
		struct flow_counts *c = counts_for(&k, 0);
		if (c)
			__sync_fetch_and_add(&c->opens, 1);
		if (!track_lifetimes)
			return 0;
		struct open_conn *oc = bpf_sk_storage_get(&conns, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!oc) {
			count_overflow(OVERFLOW_CONNS);
			return 0;
		}
		oc->key = k;
		current_comm(oc->comm);
		oc->start_ns = bpf_ktime_get_ns();
		return 0;
	}
	if (active) {
		/* close() or shutdown(): the closer's own context. */
		struct flow_key k = {};
		fill_key(&k, sk, family);
		if (sk->sk_max_ack_backlog) {
			/* Accepted: one key per server and port, not per client. */
			__builtin_memset(k.daddr, 0, sizeof(k.daddr));
			k.dport = 0;
			k.lport = sk->__sk_common.skc_num;
		}
		struct flow_counts *c = counts_for(&k, 0);
		if (c)
			__sync_fetch_and_add(&c->active_closes, 1);
		return 0;
	}
	if (failed) {
		/* tcp_set_state(CLOSE) may have released the port (skc_num
		 * 0) before this tracepoint: sk_err and whether a SYN left
		 * say why it closed; inet_sport is the port it had. */
		struct inet_sock *inet = (struct inet_sock *)sk;
		struct tcp_sock *tp = (struct tcp_sock *)sk;
		int err = sk->sk_err;
		__u16 sport = 0;
		__u32 sent = 0;
		/* Past struct sock: the verifier allows no direct load. */
		bpf_probe_read_kernel(&sport, sizeof(sport), &inet->inet_sport);
		bpf_probe_read_kernel(&sent, sizeof(sent), &tp->segs_out);
		if (err == 0 && sent != 0) {
			/* The retransmit timer gave up (tcp_write_err) and a
			 * reader of SO_ERROR took the error before this
			 * tracepoint: the timer is no longer pending and the
			 * write queue is already purged, whereas a process's
			 * own close() or shutdown() comes here with its SYN
			 * still queued and the timer set. The error was
			 * sk_err_soft, else ETIMEDOUT; a reader takes
			 * sk_err_soft only when sk_err was 0. */
			__u32 packets = 1;
			__u8 pending = 1;
			bpf_probe_read_kernel(&packets, sizeof(packets), &((struct tcp_sock___lc *)sk)->packets_out);
			bpf_probe_read_kernel(&pending, sizeof(pending), &((struct inet_connection_sock___lc *)sk)->icsk_pending);
			if (packets == 0 && pending == 0) {
				int soft = ((struct sock___lc *)sk)->sk_err_soft;
				err = soft ? soft : ETIMEDOUT;
			}
		}
		/* Ended by the process itself (no port, or its own close) or
		 * by the network (softirq/timer: pid and comm are not the
		 * opener's). */
		int own = err == 0;
		struct flow_key k = {};
		fill_key(&k, sk, family);
		__u8 comm[16] = {};
		struct open_conn *oc = 0;
		if (track_lifetimes)
			oc = bpf_sk_storage_get(&conns, sk, 0, 0);
		if (oc && oc->start_ns) {
			k = oc->key;
			__builtin_memcpy(comm, oc->comm, 16);
		} else if (own) {
			current_comm(comm);
		} else {
			k.pid = 0;
		}
		if (oc)
			oc->start_ns = 0;
		struct flow_counts *c = counts_for(&k, comm);
		__u32 reason = err;
		if (c) {
			if (own && sent == 0) {
				__sync_fetch_and_add(&c->failed_ports, 1);
				reason = EADDRNOTAVAIL;
			} else if (own) {
				__sync_fetch_and_add(&c->abandoned, 1);
			} else if (err == ECONNREFUSED) {
				__sync_fetch_and_add(&c->refused, 1);
			} else if (err == ETIMEDOUT) {
				__sync_fetch_and_add(&c->timed_out, 1);
			} else {
				__sync_fetch_and_add(&c->unreachable, 1);
			}
		} else if (own && sent == 0) {
			reason = EADDRNOTAVAIL;
		}
		struct event *e = reserve();
		if (e) {
			e->kind = EV_FAILED_CONNECT;
			e->netns = k.netns;
			e->pid = k.pid;
			__builtin_memcpy(e->comm, comm, 16);
			e->family = family;
			__builtin_memcpy(e->daddr, k.daddr, 16);
			e->dport = k.dport;
			if (family == AF_INET) {
				__be32 s4 = sk->__sk_common.skc_rcv_saddr;
				__builtin_memcpy(e->saddr, &s4, 4);
			} else {
				struct in6_addr s6 = sk->__sk_common.skc_v6_rcv_saddr;
				__builtin_memcpy(e->saddr, &s6, 16);
			}
			e->sport = (__u16)((sport >> 8) | (sport << 8));
			e->reason = reason;
			submit(e);
		}
		return 0;
	}
	if (!track_lifetimes)
		return 0;
	struct open_conn *oc = bpf_sk_storage_get(&conns, sk, 0, 0);
	if (!oc || oc->start_ns == 0)
		return 0; /* not seen opened, or closed and not reopened */
	if (passive) {
		struct flow_key k = oc->key;
		__u8 comm[16];
		__builtin_memcpy(comm, oc->comm, 16);
		struct flow_counts *c = counts_for(&k, comm);
		if (c)
			__sync_fetch_and_add(&c->peer_closes, 1);
		return 0;
	}
	/* newstate == TCP_CLOSE */
	__u64 d = bpf_ktime_get_ns() - oc->start_ns;
	oc->start_ns = 0;
	struct flow_key k = oc->key;
	__u8 comm[16];
	__builtin_memcpy(comm, oc->comm, 16);
	struct flow_counts *c = counts_for(&k, comm);
	if (c) {
		__sync_fetch_and_add(&c->lifetime_ns, d);
		__sync_fetch_and_add(&c->lifetimes, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

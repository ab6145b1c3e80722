// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Exact-time events of the sockets `tcpdoctor trace` follows.
 *
 * User space puts the cookie of each traced socket in the hash map
 * "watched"; only those sockets emit, one struct trace_event each to the
 * ring buffer "trace_events" (wakeups batched: the reader drains it every
 * sample):
 *   tcp_retransmit_skb  a segment retransmitted
 *   tcp_rcv_space_adjust the receive buffer or window clamp differs from
 *                       what the previous call saw: receive autotuning
 *                       stepped (the tracepoint runs at the start of the
 *                       call, so the step is seen at the next read by the
 *                       application, with its values)
 *   tcp_send_reset      a reset sent on the socket, with sk_rst_reason
 *   tcp_receive_reset   a reset received
 * and, to spare user space the discovery dumps while nothing new can be
 * found, inet_sock_set_state counts sockets of the traced namespace
 * entering ESTABLISHED with a port in "ports" (any port when any_port).
 *
 * So that user space reads a quiet socket only once it moves, every hook
 * above (tcp_rcv_space_adjust runs at each read by the application,
 * inet_sock_set_state at each state change), tcp_sendmsg_locked (the
 * application writing) and sk_data_ready (data or a FIN arriving) bump the
 * watched socket's counter in "activity", an array user space maps into
 * its memory: no system call to tell which sockets moved since the last
 * sample. sk_data_ready runs for every socket of the host that receives:
 * a cookie and a hash lookup each.
 *
 * Kernel types carry a "___tr" flavour suffix (CO-RE ignores it), so this
 * file needs nothing from the shared vmlinux.h beyond its base types.
 */

#include "vmlinux.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define BPF_F_MMAPABLE 1024
#define MAX_WATCHED 65536

#define TCP_ESTABLISHED 1

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct atomic64___tr {
	__s64 counter;
};

struct sock_common___tr {
	__be16 skc_dport;
	__u16 skc_num;
	possible_net_t skc_net;
	struct atomic64___tr skc_cookie;
};

struct sock___tr {
	struct sock_common___tr __sk_common;
	int sk_rcvbuf;
};

struct tcp_sock___tr {
	__u32 window_clamp;
	__u32 rcv_ssthresh;
};

#pragma clang attribute pop

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static void *(*bpf_skc_to_tcp_sock)(void *sk) = (void *)137;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static __u64 (*bpf_ringbuf_query)(void *ringbuf, __u64 flags) = (void *)134;

/* Set by the loader. */
const volatile __u32 traced_netns = 0; /* namespace inode counted by state() */
const volatile __u32 any_port = 1;    /* count every port, not only "ports" */
const volatile __u64 wakeup_bytes = 16 * 1024;

enum {
	TEV_RETRANSMIT = 1,
	TEV_RCV_SPACE = 2,
	TEV_RESET_SENT = 3,
	TEV_RESET_RECEIVED = 4,
};

/* One event; decoded by decodeTraceEvent (trace.go). */
struct trace_event {
	__u64 ts; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u64 cookie;
	__u32 kind;
	__u32 reason; /* resets sent: sk_rst_reason */
	__u32 rcvbuf; /* every kind: sk_rcvbuf at the event */
	__u32 clamp;  /* every kind: window_clamp at the event */
};

/* A watched socket: its slot in "activity", and what rcv_space() last
 * saw of it. */
struct watched_val {
	__u32 rcvbuf;
	__u32 clamp;
	__u32 slot;
};

const struct trace_event *unused_trace_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_WATCHED);
	__type(key, __u64);
	__type(value, struct watched_val);
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_WATCHED);
	__type(key, __u32);
	__type(value, __u64); /* array elements are 8-byte aligned in the mapping */
} activity SEC(".maps");

static void moved(struct watched_val *w)
{
	__u32 slot = w->slot;
	__u64 *n = bpf_map_lookup_elem(&activity, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* watched_sk is the watched entry of sk, or NULL. The cookie is read,
 * not made: a socket nobody asked the cookie of (0) is not traced, and
 * the hooks on every write and receive of the host stay cheap. */
static struct watched_val *watched_sk(void *sk, __u64 *cookie)
{
	if (!sk)
		return 0;
	*cookie = ((struct sock___tr *)sk)->__sk_common.skc_cookie.counter;
	if (!*cookie)
		return 0;
	return bpf_map_lookup_elem(&watched, cookie);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u16);
	__type(value, __u8);
} ports SEC(".maps");

/* Index 0: sockets counted by state(); 1: events the ring could not take.
 * Mapped by user space, which reads index 0 every tick. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} trace_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} trace_events SEC(".maps");

static void bump(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&trace_counts, &i);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static void emit(struct sock___tr *sk, __u64 cookie, __u32 kind, __u32 reason)
{
	struct trace_event *e = bpf_ringbuf_reserve(&trace_events, sizeof(*e), 0);
	if (!e) {
		bump(1);
		return;
	}
	struct tcp_sock___tr *tp = bpf_skc_to_tcp_sock(sk);
	e->ts = bpf_ktime_get_ns();
	e->cookie = cookie;
	e->kind = kind;
	e->reason = reason;
	e->rcvbuf = sk->sk_rcvbuf;
	e->clamp = tp ? tp->window_clamp : 0;
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&trace_events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

/* watch emits kind for sk when its cookie is watched. */
static void watch(struct sock___tr *sk, __u32 kind, __u32 reason)
{
	__u64 cookie;
	struct watched_val *w = watched_sk(sk, &cookie);
	if (!w)
		return;
	moved(w);
	emit(sk, cookie, kind, reason);
}

/* mark bumps sk's activity counter when it is watched. */
static void mark(void *sk)
{
	__u64 cookie;
	struct watched_val *w = watched_sk(sk, &cookie);
	if (w)
		moved(w);
}

SEC("tp_btf/tcp_sendmsg_locked")
int trace_send(__u64 *ctx)
{
	mark((void *)ctx[0]);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int trace_data_ready(__u64 *ctx)
{
	mark((void *)ctx[0]);
	return 0;
}


SEC("tp_btf/tcp_retransmit_skb")
int trace_retransmit(__u64 *ctx)
{
	watch((struct sock___tr *)ctx[0], TEV_RETRANSMIT, 0);
	return 0;
}

SEC("tp_btf/tcp_rcv_space_adjust")
int trace_rcv_space(__u64 *ctx)
{
	struct sock___tr *sk = (struct sock___tr *)ctx[0];
	__u64 cookie;
	struct watched_val *w = watched_sk(sk, &cookie);
	if (!w)
		return 0;
	moved(w); /* the application read */
	struct tcp_sock___tr *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u32 rcvbuf = sk->sk_rcvbuf, clamp = tp->window_clamp;
	if (w->rcvbuf == rcvbuf && w->clamp == clamp)
		return 0;
	__u32 first = w->rcvbuf == 0;
	w->rcvbuf = rcvbuf;
	w->clamp = clamp;
	if (!first) /* the first call only sets where steps count from */
		emit(sk, cookie, TEV_RCV_SPACE, 0);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int trace_reset_sent(__u64 *ctx)
{
	watch((struct sock___tr *)ctx[0], TEV_RESET_SENT, (__u32)ctx[2]);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int trace_reset_received(__u64 *ctx)
{
	watch((struct sock___tr *)ctx[0], TEV_RESET_RECEIVED, 0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int trace_state(__u64 *ctx)
{
	struct sock___tr *sk = (struct sock___tr *)ctx[0];
	if (!sk)
		return 0;
	mark(sk); /* a watched socket closing */
	if ((int)ctx[2] != TCP_ESTABLISHED)
		return 0;
	if (sk->__sk_common.skc_net.net->ns.inum != traced_netns)
		return 0;
	if (!any_port) {
		__u16 lport = sk->__sk_common.skc_num;
		__u16 rport = __builtin_bswap16(sk->__sk_common.skc_dport);
		if (!bpf_map_lookup_elem(&ports, &lport) && !bpf_map_lookup_elem(&ports, &rport))
			return 0;
	}
	bump(0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

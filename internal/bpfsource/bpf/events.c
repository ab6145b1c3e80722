// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Drop, retransmit and reset counters, and the ring buffer of rare events.
 *
 * Each program is loaded and attached on its own (a kernel may refuse one
 * and run the rest). All count in bounded hash maps that user space reads
 * and empties; what did not fit is counted in ev_lost. Rare events also go
 * to the ring buffer "events", shared with lifecycle.c (failed connects):
 *   kfree_skb          drops by reason per namespace; TCP_LISTEN_OVERFLOW
 *                      per listener (rx_sk), also as an event
 *   tcp_retransmit_skb retransmits per peer; those in SYN_SENT (a SYN
 *                      nobody answered: the client side of a full accept
 *                      queue) apart, also as an event
 *   tcp_send_reset,    resets per direction, reason and peer, also as
 *   tcp_receive_reset  events
 * Reason numbers differ between kernels: the loader sets the ones the
 * programs compare against from the kernel's BTF enums.
 */

#include "events_types.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_NOEXIST 1
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define AF_INET 2
#define AF_INET6 10

enum {
	TCP_ESTABLISHED = 1,
	TCP_SYN_SENT = 2,
	TCP_TIME_WAIT = 6,
	TCP_LISTEN = 10,
	TCP_NEW_SYN_RECV = 12,
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_get_current_comm)(void *buf, __u32 size_of_buf) = (void *)16;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static __u64 (*bpf_ringbuf_query)(void *ringbuf, __u64 flags) = (void *)134;

/* Set by the loader from the kernel's BTF before loading. */
const volatile __u32 drop_has_rx_sk = 0;      /* kfree_skb has its 4th argument */
const volatile __u32 drop_listen_overflow = 0; /* SKB_DROP_REASON_TCP_LISTEN_OVERFLOW */
const volatile __u32 drop_skip_a = 0;          /* SKB_DROP_REASON_NOT_SPECIFIED */
const volatile __u32 drop_skip_b = 0;          /* SKB_DROP_REASON_QUEUE_PURGE */
const volatile __u32 drop_skip_below = 0;      /* SKB_DROP_REASON_NOT_SPECIFIED: not drops */
/* Wake the reader once this many bytes wait in the ring; below it the
 * reader finds them at its next deadline (~100 ms). */
const volatile __u64 wakeup_bytes = 64 * 1024;

#include "events_shared.h"

struct drop_key {
	__u32 netns;
	__u32 reason;
	__u8 laddr[16]; /* TCP_LISTEN_OVERFLOW: the listener; else zero */
	__u16 lport;
	__u16 family;
	__u32 pad;
};

struct peer_key {
	__u32 netns;
	__u32 reason; /* resets: sk_rst_reason (sent) or 0 (received) */
	__u8 raddr[16];
	__u16 rport; /* 0 when the socket was accepted: one key per client address */
	__u16 lport; /* accepted sockets: the port they came in on; else 0 */
	__u16 family;
	__u8 syn;    /* retransmits: 1 in SYN_SENT. resets: 1 sent, 0 received */
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct drop_key);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct peer_key);
	__type(value, __u64);
} retrans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct peer_key);
	__type(value, __u64);
} resets SEC(".maps");

const struct drop_key *unused_drop_key __attribute__((unused));
const struct peer_key *unused_peer_key __attribute__((unused));

static void count(void *map, void *key, __u32 lost)
{
	__u64 *n = bpf_map_lookup_elem(map, key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0)
		return;
	n = bpf_map_lookup_elem(map, key); /* another CPU made it, or full */
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		count_lost(lost);
}

static __u32 sk_netns(struct sock___ev *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

static __u16 swap16(__u16 v) { return (__u16)((v >> 8) | (v << 8)); }

/* Addresses of a socket, remote into ra/rport, local into la/lport. */
static __u16 sk_addrs(struct sock___ev *sk, __u8 *ra, __u16 *rport, __u8 *la, __u16 *lport)
{
	__u16 family = sk->__sk_common.skc_family;
	*rport = swap16(sk->__sk_common.skc_dport);
	*lport = sk->__sk_common.skc_num;
	if (family == AF_INET) {
		__be32 d = sk->__sk_common.skc_daddr, s = sk->__sk_common.skc_rcv_saddr;
		__builtin_memcpy(ra, &d, 4);
		if (la)
			__builtin_memcpy(la, &s, 4);
	} else if (family == AF_INET6) {
		struct in6_addr d6 = sk->__sk_common.skc_v6_daddr, s6 = sk->__sk_common.skc_v6_rcv_saddr;
		__builtin_memcpy(ra, &d6, 16);
		if (la)
			__builtin_memcpy(la, &s6, 16);
	} else {
		return 0;
	}
	return family;
}

/* Addresses of an incoming packet: its source is the remote end. */
static __u16 skb_addrs(struct sk_buff *skb, __u8 *ra, __u16 *rport, __u8 *la, __u16 *lport)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header, th = skb->transport_header;
	__u8 ver = 0;
	if (!head || bpf_probe_read_kernel(&ver, 1, head + nh) != 0)
		return 0;
	__u16 ports[2] = {};
	if (bpf_probe_read_kernel(ports, sizeof(ports), head + th) != 0)
		return 0;
	*rport = swap16(ports[0]);
	*lport = swap16(ports[1]);
	switch (ver >> 4) {
	case 4:
		bpf_probe_read_kernel(ra, 4, head + nh + 12);
		if (la)
			bpf_probe_read_kernel(la, 4, head + nh + 16);
		return AF_INET;
	case 6:
		bpf_probe_read_kernel(ra, 16, head + nh + 8);
		if (la)
			bpf_probe_read_kernel(la, 16, head + nh + 24);
		return AF_INET6;
	}
	return 0;
}

static __u32 skb_netns(struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	if (!dev)
		return 0;
	return dev->nd_net.net->ns.inum;
}

/* A full socket that was accepted keeps its listener's backlog; keying it
 * by local port rather than by the client's port bounds the keys. */
static void service_side(struct sock___ev *sk, struct peer_key *k)
{
	unsigned char st = sk->__sk_common.skc_state;
	if (st == TCP_TIME_WAIT || st == TCP_NEW_SYN_RECV)
		return; /* not a full socket: keep both ports */
	if (sk->sk_max_ack_backlog) {
		k->rport = 0;
	} else {
		k->lport = 0;
	}
}

SEC("tp_btf/kfree_skb")
int drop(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	__u32 reason = (__u32)ctx[2];
	if (reason < drop_skip_below || reason == drop_skip_a || reason == drop_skip_b)
		return 0;
	struct drop_key k = {.reason = reason};
	struct sock___ev *sk = 0;
	if (drop_has_rx_sk)
		sk = (struct sock___ev *)ctx[3];
	if (sk)
		k.netns = sk_netns(sk);
	else if (skb)
		k.netns = skb_netns(skb);
	if (reason != drop_listen_overflow || !sk) {
		count(&drops, &k, LOST_DROPS);
		return 0;
	}
	__u8 ra[16] = {};
	__u16 rport = 0;
	k.family = sk_addrs(sk, ra, &rport, k.laddr, &k.lport);
	count(&drops, &k, LOST_DROPS);

	struct event *e = reserve();
	if (!e)
		return 0;
	e->kind = EV_LISTEN_OVERFLOW;
	e->netns = k.netns;
	e->reason = reason;
	e->family = k.family;
	__builtin_memcpy(e->saddr, k.laddr, 16);
	e->sport = k.lport;
	if (skb) {
		/* The packet that found the queue full: its sender. */
		__u16 lp = 0;
		skb_addrs(skb, e->daddr, &e->dport, 0, &lp);
	}
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int retransmit(__u64 *ctx)
{
	struct sock___ev *sk = (struct sock___ev *)ctx[0];
	if (!sk)
		return 0;
	struct peer_key k = {};
	__u8 la[16] = {};
	__u16 lport = 0;
	k.netns = sk_netns(sk);
	k.family = sk_addrs(sk, k.raddr, &k.rport, la, &lport);
	k.lport = lport;
	if (!k.family)
		return 0;
	k.syn = sk->__sk_common.skc_state == TCP_SYN_SENT;
	if (k.syn)
		k.lport = 0; /* the client's ephemeral port: one key per destination */
	else
		service_side(sk, &k);
	count(&retrans, &k, LOST_RETRANS);
	if (!k.syn)
		return 0;
	struct event *e = reserve();
	if (!e)
		return 0;
	e->kind = EV_SYN_RETRANSMIT;
	e->netns = k.netns;
	e->family = k.family;
	__builtin_memcpy(e->saddr, la, 16);
	e->sport = lport;
	__builtin_memcpy(e->daddr, k.raddr, 16);
	e->dport = k.rport;
	submit(e);
	return 0;
}

static void reset(struct sock___ev *sk, struct sk_buff *skb, __u32 reason, __u8 sent)
{
	struct peer_key k = {.reason = reason, .syn = sent};
	__u8 la[16] = {};
	__u16 lport = 0;
	if (skb) {
		/* A reply to this packet (sent): the packet's source is the peer. */
		k.family = skb_addrs(skb, k.raddr, &k.rport, la, &lport);
		k.netns = sk ? sk_netns(sk) : skb_netns(skb);
	} else if (sk) {
		k.family = sk_addrs(sk, k.raddr, &k.rport, la, &lport);
		k.netns = sk_netns(sk);
	}
	if (!k.family)
		return;
	k.lport = lport;
	struct event *e = reserve();
	if (e) {
		e->kind = sent ? EV_RESET_SENT : EV_RESET_RECEIVED;
		e->netns = k.netns;
		e->reason = reason;
		e->family = k.family;
		__builtin_memcpy(e->saddr, la, 16);
		e->sport = lport;
		__builtin_memcpy(e->daddr, k.raddr, 16);
		e->dport = k.rport;
		if (sent && !skb) {
			/* Sent on the socket's own behalf: close(), shutdown(),
			 * or a timer; user space keeps pid/comm only for the
			 * reasons that come from the process. */
			e->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(e->comm, sizeof(e->comm));
		}
		submit(e);
	}
	if (sk)
		service_side(sk, &k);
	else
		k.rport = 0; /* no socket: the peer's port is its own ephemeral one */
	count(&resets, &k, LOST_RESETS);
}

SEC("tp_btf/tcp_send_reset")
int reset_sent(__u64 *ctx)
{
	reset((struct sock___ev *)ctx[0], (struct sk_buff *)ctx[1], (__u32)ctx[2], 1);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int reset_received(__u64 *ctx)
{
	struct sock___ev *sk = (struct sock___ev *)ctx[0];
	if (sk)
		reset(sk, 0, 0, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* The ring buffer of rare events and the lost-event counters, shared by
 * events.c and lifecycle.c: the loader creates both maps once and hands
 * them to every object. Include after the helper declarations and
 * wakeup_bytes. */
#ifndef TCPDOCTOR_EVENTS_SHARED_H
#define TCPDOCTOR_EVENTS_SHARED_H

/* Kinds of struct event (Go: EventKind). */
enum {
	EV_FAILED_CONNECT = 1,
	EV_RESET_SENT = 2,
	EV_RESET_RECEIVED = 3,
	EV_LISTEN_OVERFLOW = 4,
	EV_SYN_RETRANSMIT = 5,
};

/* One rare event. saddr/sport are the local end, daddr/dport the remote
 * one; ports in host order. pid/comm only where the program ran in the
 * process's own context, else 0. */
struct event {
	__u64 ts_ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 netns;
	__u32 pid;
	__u8 comm[16];
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u8 kind;
	__u8 pad;
	__u32 reason;
	__u32 pad2;
};

/* ev_lost slots: events not counted because a map was full, or not sent
 * because the ring was full. */
enum {
	LOST_DROPS = 0,
	LOST_RETRANS = 1,
	LOST_RESETS = 2,
	LOST_RING = 3,
	LOST_SLOTS = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} ev_lost SEC(".maps");

/* ev_stream[0] is 1 while user space reads the ring (Source.Events):
 * without a reader nothing is reserved, so check and serve pay nothing
 * for the ring and a full ring never forces wakeups. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ev_stream SEC(".maps");

const struct event *unused_event __attribute__((unused));

static void count_lost(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&ev_lost, &i);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* A zeroed event stamped with the time; NULL when nobody streams, or
 * (counted) when the ring is full. */
static struct event *reserve(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&ev_stream, &zero);
	if (!on || !*on)
		return 0;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(struct event), 0);
	if (!e) {
		count_lost(LOST_RING);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	return e;
}

/* Batched wakeups: the reader is woken only once wakeup_bytes wait. */
static void submit(struct event *e)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + sizeof(*e) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

#endif

// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Buffer lock bits of every TCP socket, from an iter/tcp iterator.
 *
 * For each full TCP socket of the network namespace of the task that
 * opens the iterator, one fixed-size struct sock_lock is written to the
 * seq_file: socket cookie (as sock_diag reports it), state,
 * sk_userlocks & 0x3 (SOCK_SNDBUF_LOCK 1, SOCK_RCVBUF_LOCK 2; the higher
 * bits are bind flags), sk_sndbuf and sk_rcvbuf. TIME_WAIT and request
 * sockets have no tcp_sock (bpf_skc_to_tcp_sock gives NULL) and no locks:
 * they are skipped. Nothing is written to any socket.
 *
 * The kernel types are declared here with a "___sl" flavour suffix (CO-RE
 * ignores it when matching names), so this file needs nothing from the
 * shared vmlinux.h the other programs extend.
 */

#include "vmlinux.h"

#define SEC(name) __attribute__((section(name), used))

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct seq_file;

struct bpf_iter_meta___sl {
	struct seq_file *seq;
};

struct sock_common___sl {
	unsigned char skc_state;
	possible_net_t skc_net;
};

struct sock___sl {
	__u8 sk_userlocks;
	int sk_rcvbuf;
	int sk_sndbuf;
};

#pragma clang attribute pop

static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static __u64 (*bpf_get_socket_cookie)(void *sk) = (void *)46;
static void *(*bpf_skc_to_tcp_sock)(void *sk) = (void *)137;

#define SOCK_SNDBUF_LOCK 1
#define SOCK_RCVBUF_LOCK 2

/* sk_userlocks is a 4-bit bitfield before Linux 6.x and a u8 after: read
 * it as libbpf's BPF_CORE_READ_BITFIELD does, with the offset, size and
 * shifts relocated against the running kernel's layout. */
enum {
	FIELD_BYTE_OFFSET = 0,
	FIELD_BYTE_SIZE = 1,
	FIELD_LSHIFT_U64 = 4,
	FIELD_RSHIFT_U64 = 5,
};
#define CORE_INFO(s, field, kind) __builtin_preserve_field_info((s)->field, kind)
#define READ_BITFIELD(s, field) ({                                              \
	const void *p = (const void *)(s) + CORE_INFO(s, field, FIELD_BYTE_OFFSET); \
	__u64 val = 0;                                                          \
	asm volatile("" : "=r"(p) : "0"(p));                                    \
	switch (CORE_INFO(s, field, FIELD_BYTE_SIZE)) {                         \
	case 1: val = *(const __u8 *)p; break;                                  \
	case 2: val = *(const __u16 *)p; break;                                 \
	case 4: val = *(const __u32 *)p; break;                                 \
	case 8: val = *(const __u64 *)p; break;                                 \
	}                                                                       \
	val <<= CORE_INFO(s, field, FIELD_LSHIFT_U64);                          \
	val >>= CORE_INFO(s, field, FIELD_RSHIFT_U64);                          \
	val;                                                                    \
})

/* One record; decoded by decodeSockLocks (socklocks.go). */
struct sock_lock {
	__u64 cookie;
	__u32 netns;
	__s32 sndbuf;
	__s32 rcvbuf;
	__u8 state;
	__u8 locks;
	__u16 pad;
};

const struct sock_lock *unused_sock_lock __attribute__((unused));

/* ctx is struct bpf_iter__tcp: meta at 0, sk_common at 8 (may be NULL
 * at the end of the walk). */
SEC("iter/tcp")
int socklocks(__u64 *ctx)
{
	struct bpf_iter_meta___sl *meta = (void *)ctx[0];
	struct sock_common___sl *skc = (void *)ctx[1];
	if (!skc)
		return 0;
	struct sock___sl *sk = bpf_skc_to_tcp_sock(skc);
	if (!sk)
		return 0; /* TIME_WAIT or request socket: no locks */
	struct sock_lock r = {};
	r.cookie = bpf_get_socket_cookie(skc);
	r.netns = skc->skc_net.net->ns.inum;
	r.state = skc->skc_state;
	r.locks = READ_BITFIELD(sk, sk_userlocks) & (SOCK_SNDBUF_LOCK | SOCK_RCVBUF_LOCK);
	r.sndbuf = sk->sk_sndbuf;
	r.rcvbuf = sk->sk_rcvbuf;
	bpf_seq_write(meta->seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

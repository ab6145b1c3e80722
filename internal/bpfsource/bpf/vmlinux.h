/* Only the kernel types the programs read, marked preserve_access_index so
 * clang records CO-RE relocations: libbpf/cilium resolve the offsets
 * against the running kernel's BTF at load. */
#ifndef TCPDOCTOR_VMLINUX_H
#define TCPDOCTOR_VMLINUX_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct ns_common {
	unsigned int inum;
};

struct net {
	struct ns_common ns;
};

typedef struct {
	struct net *net;
} possible_net_t;

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	__u32 sk_max_ack_backlog;
	int sk_err;
};

/* inet_sport is the source port connect() bound (network order); the
 * kernel clears skc_num when it releases the port, not inet_sport. */
struct inet_sock {
	struct sock sk;
	__be16 inet_sport;
};

/* segs_out counts the segments the socket sent, its SYN included. */
struct tcp_sock {
	__u32 segs_out;
};

#pragma clang attribute pop

#endif

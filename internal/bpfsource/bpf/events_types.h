// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Kernel types events.c reads, beyond vmlinux.h, with CO-RE relocations
 * (preserve_access_index): offsets come from the running kernel's BTF. */
#ifndef TCPDOCTOR_EVENTS_TYPES_H
#define TCPDOCTOR_EVENTS_TYPES_H

#include "vmlinux.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

/* struct sock_common as events.c sees it: the fields vmlinux.h has plus
 * the state and the local addresses. A different name keeps the two
 * headers apart; CO-RE matches it to the kernel's sock_common by the
 * ___flavour suffix. */
struct sock_common___ev {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct sock___ev {
	struct sock_common___ev __sk_common;
	__u16 sk_protocol;
	__u32 sk_max_ack_backlog;
};

struct net_device {
	possible_net_t nd_net;
};

struct sk_buff {
	struct sock *sk;
	struct net_device *dev;
	unsigned char *head;
	__u16 transport_header;
	__u16 network_header;
};

#pragma clang attribute pop

#endif

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerates the live-kernel fixtures from this machine:
#   testdata/linux-$(uname -r | cut -d. -f1,2)/{net,sys}
# then rewrite the golden files with: go test ./internal/procnet -run Golden -update
# Sysctls this kernel lacks are left out, as the kernel leaves them out.
set -eu
cd "$(dirname "$0")"
dir="linux-$(uname -r | cut -d. -f1,2)"
rm -rf "$dir/net" "$dir/sys"
mkdir -p "$dir/net"
for f in netstat snmp sockstat sockstat6; do
	cat "/proc/thread-self/net/$f" >"$dir/net/$f"
done
# Keep this list in step with sysctlNames in procnet.go.
for name in \
	net.core.somaxconn net.core.netdev_max_backlog net.core.rmem_default \
	net.core.rmem_max net.core.wmem_default net.core.wmem_max \
	net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.ipv4.tcp_mem \
	net.ipv4.tcp_moderate_rcvbuf net.ipv4.ip_local_port_range \
	net.ipv4.ip_local_reserved_ports net.ipv4.tcp_tw_reuse net.ipv4.tcp_tw_reuse_delay \
	net.ipv4.tcp_fin_timeout net.ipv4.tcp_max_tw_buckets \
	net.ipv4.tcp_max_syn_backlog net.ipv4.tcp_syncookies \
	net.ipv4.tcp_congestion_control net.ipv4.tcp_available_congestion_control \
	net.ipv4.tcp_slow_start_after_idle net.ipv4.tcp_notsent_lowat \
	net.ipv4.tcp_keepalive_time net.ipv4.tcp_keepalive_intvl \
	net.ipv4.tcp_keepalive_probes net.ipv4.tcp_syn_retries \
	net.ipv4.tcp_synack_retries net.ipv4.tcp_retries2 \
	net.ipv4.tcp_abort_on_overflow net.ipv4.tcp_tw_recycle \
	net.ipv4.tcp_timestamps net.ipv4.tcp_window_scaling net.ipv4.tcp_sack \
	net.ipv4.tcp_ecn net.ipv4.ip_forward fs.file-max fs.file-nr fs.nr_open; do
	rel=$(echo "$name" | tr . /)
	[ -e "/proc/sys/$rel" ] || continue
	mkdir -p "$dir/sys/$(dirname "$rel")"
	cat "/proc/sys/$rel" >"$dir/sys/$rel"
done
echo "wrote $dir"

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

C2 round 2: a Netty server (java) listening on :8080 with SO_BACKLOG 128
under a connection burst; somaxconn 4096. Numbers as Linux 6.18 reports
them: Recv-Q of a full listener is backlog+1 (ss -lnt: 129 / 128)."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}
SYS = {"net.core.somaxconn": "4096", "net.ipv4.tcp_abort_on_overflow": "0",
       "net.ipv4.tcp_max_syn_backlog": "4096", "net.ipv4.tcp_syncookies": "1",
       "net.ipv4.ip_local_port_range": "32768 60999", "net.ipv4.ip_local_reserved_ports": ""}

def lis(addr, q, backlog, cookie, inode, pid):
    return {"family": 10 if addr.startswith("[") else 2, "state": "LISTEN", "local": addr,
            "remote": "[::]:0" if addr.startswith("[") else "0.0.0.0:0",
            "recv_q": q, "send_q": backlog, "uid": 0, "inode": inode, "cookie": cookie, "pids": [pid]}

def est(l, r, cookie, inode, pid):
    return {"family": 2, "state": "ESTAB", "local": l, "remote": r, "recv_q": 0, "send_q": 0,
            "uid": 1000, "inode": inode, "cookie": cookie, "pids": [pid] if pid else []}

def snap(taken, socks, counters, procs):
    return {"taken": taken, "host": "ws1", "kernel": "6.18.0", "netns": {"name": "host"},
            "sockets": socks, "counters": counters, "sysctls": SYS, "procs": procs}

def proc(pid, cmd, fds):
    return {"pid": pid, "command": cmd, "fds": fds, "nofile_soft": 65536, "nofile_hard": 65536}

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

procs = {"812": proc(812, "sshd", 9), "4242": proc(4242, "java", 9120)}
base = [lis("0.0.0.0:22", 0, 128, 11, 2101, 812), lis("[::]:22", 0, 128, 12, 2102, 812)]
c0 = {"TcpExt.ListenOverflows": 1880, "TcpExt.ListenDrops": 1880, "Tcp.PassiveOpens": 9012, "Tcp.ActiveOpens": 220}
c1 = {"TcpExt.ListenOverflows": 2192, "TcpExt.ListenDrops": 2192, "Tcp.PassiveOpens": 9140, "Tcp.ActiveOpens": 221}
clients = [est("10.0.0.5:8080", "10.0.1.%d:%d" % (7 + i % 3, 40000 + i), 100 + i, 3000 + i, 4242) for i in range(4)]
write("fires.jsonl", [
    snap("2025-03-02T10:00:00Z", base + [lis("0.0.0.0:8080", 126, 128, 20, 2200, 4242)] + clients, c0, procs),
    snap("2025-03-02T10:00:05Z", base + [lis("0.0.0.0:8080", 129, 128, 20, 2200, 4242)] + clients, c1, procs),
])

# Quiet: nginx idle on :80 with backlog 511, counters non-zero since boot
# but not moving in the window.
qprocs = {"812": proc(812, "sshd", 9), "900": proc(900, "nginx", 40)}
qbase = base + [lis("0.0.0.0:80", 0, 511, 30, 2300, 900), lis("0.0.0.0:443", 1, 511, 31, 2301, 900)]
qc = {"TcpExt.ListenOverflows": 3, "TcpExt.ListenDrops": 3, "Tcp.PassiveOpens": 120000, "Tcp.ActiveOpens": 50}
qc1 = dict(qc, **{"Tcp.PassiveOpens": 120450})
write("quiet.jsonl", [
    snap("2025-03-02T10:00:00Z", qbase, qc, qprocs),
    snap("2025-03-02T10:00:05Z", qbase, qc1, qprocs),
])

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

C2 round 3 in a lab namespace whose ephemeral range was narrowed to 200
ports (60000-60199, 60100 reserved): an nginx proxy (pids 900, 901) opens
connections to one backend 198.18.2.9:7001 without keep-alive. 5 s apart,
its use grows from 150 to 190 of 199 usable ports."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}
SYS = {"net.ipv4.ip_local_port_range": "60000 60199", "net.ipv4.ip_local_reserved_ports": "60100",
       "net.ipv4.tcp_tw_reuse": "2", "net.ipv4.tcp_timestamps": "1", "net.core.somaxconn": "4096",
       "net.ipv4.tcp_max_tw_buckets": "262144"}
SRC, DST = "198.18.1.5", "198.18.2.9:7001"

def sock(state, l, r, cookie, pid, recvq=0, sendq=0):
    return {"family": 2, "state": state, "local": l, "remote": r, "recv_q": recvq, "send_q": sendq,
            "uid": 33, "inode": 0 if state == "TIME-WAIT" else 5000 + cookie, "cookie": cookie,
            "pids": [pid] if pid and state != "TIME-WAIT" else []}

def snap(taken, socks, counters):
    return {"taken": taken, "host": "proxy1", "kernel": "6.18.0", "netns": {"name": "lab-c2"},
            "sockets": socks, "counters": counters, "sysctls": SYS,
            "procs": {"900": {"pid": 900, "command": "nginx", "fds": 420, "nofile_soft": 65536, "nofile_hard": 65536},
                      "901": {"pid": 901, "command": "nginx", "fds": 380, "nofile_soft": 65536, "nofile_hard": 65536}}}

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

ports = [p for p in range(60000, 60200) if p != 60100]
listen = [sock("LISTEN", "0.0.0.0:80", "0.0.0.0:0", 1, 900, 0, 4096)]
clients = [sock("ESTAB", "198.18.1.5:80", "198.18.0.%d:%d" % (10 + i, 41000 + i), 10 + i, 900 + i % 2) for i in range(6)]
other = [sock("ESTAB", "%s:%d" % (SRC, ports[198]), "198.18.2.10:6379", 99, 900)]  # redis, pooled

def backend(n, tw_upto, first_cookie):
    out = []
    for i in range(n):
        st = "TIME-WAIT" if i < tw_upto else "ESTAB"
        out.append(sock(st, "%s:%d" % (SRC, ports[i]), DST, first_cookie + i, 900 + i % 2))
    return out

c0 = {"Tcp.ActiveOpens": 500000, "Tcp.PassiveOpens": 800000}
c1 = {"Tcp.ActiveOpens": 500040, "Tcp.PassiveOpens": 800040}
# prev: 150 sockets, 60 in TIME_WAIT; cur: same 150 (90 now in TIME_WAIT) + 40 new.
write("fires.jsonl", [
    snap("2025-03-02T11:00:00Z", listen + clients + other + backend(150, 60, 1000), c0),
    snap("2025-03-02T11:00:05Z", listen + clients + other + backend(150, 90, 1000) +
         [sock("ESTAB", "%s:%d" % (SRC, ports[150 + i]), DST, 2000 + i, 900 + i % 2) for i in range(40)], c1),
])
# quiet: the same proxy with a keep-alive pool of 32 connections.
write("quiet.jsonl", [
    snap("2025-03-02T11:00:00Z", listen + clients + other + backend(32, 0, 1000), c0),
    snap("2025-03-02T11:00:05Z", listen + clients + other + backend(32, 0, 1000), dict(c0, **{"Tcp.PassiveOpens": 800040})),
])

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

C4 in a lab namespace with the ephemeral range narrowed to 400 ports
(60000-60399): a Java mail gateway (pid 3100) opens one SMTP connection
per mail to 198.18.3.25:25 and closes it first. In 5 s, 100 new
connections go to TIME_WAIT (20/s; 20/s x 60 s = 1200 ports needed)."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}
SYS = {"net.ipv4.ip_local_port_range": "60000 60399", "net.ipv4.ip_local_reserved_ports": "",
       "net.ipv4.tcp_tw_reuse": "2", "net.ipv4.tcp_timestamps": "1", "net.ipv4.tcp_max_tw_buckets": "262144",
       "net.ipv4.tcp_fin_timeout": "60"}
SRC, DST = "198.18.1.7", "198.18.3.25:25"

def sock(state, port, cookie):
    return {"family": 2, "state": state, "local": "%s:%d" % (SRC, port), "remote": DST, "recv_q": 0, "send_q": 0,
            "uid": 1000, "inode": 0 if state == "TIME-WAIT" else 7000 + cookie, "cookie": cookie,
            "pids": [] if state == "TIME-WAIT" else [3100]}

def snap(taken, socks, counters):
    lis = {"family": 2, "state": "LISTEN", "local": "0.0.0.0:8080", "remote": "0.0.0.0:0", "recv_q": 0,
           "send_q": 4096, "uid": 1000, "inode": 6999, "cookie": 5, "pids": [3100]}
    return {"taken": taken, "host": "mailgw", "kernel": "6.18.0", "netns": {"name": "lab-c4"},
            "sockets": [lis] + socks, "counters": counters, "sysctls": SYS,
            "procs": {"3100": {"pid": 3100, "command": "java", "fds": 210, "nofile_soft": 65536, "nofile_hard": 65536}}}

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

# prev: cookies 1000..1149 in TIME_WAIT, 1150..1153 open.
prev = [sock("TIME-WAIT", 60000 + i, 1000 + i) for i in range(150)] + [sock("ESTAB", 60150 + i, 1150 + i) for i in range(4)]
# cur: those 154 closed (TIME_WAIT), 96 more opened and closed, 4 open now.
cur = [sock("TIME-WAIT", 60000 + i, 1000 + i) for i in range(250)] + [sock("ESTAB", 60250 + i, 1250 + i) for i in range(4)]
c0 = {"Tcp.ActiveOpens": 90000, "TcpExt.TCPTimeWaitOverflow": 0, "TcpExt.TCPAbortOnClose": 0}
c1 = {"Tcp.ActiveOpens": 90100, "TcpExt.TCPTimeWaitOverflow": 0, "TcpExt.TCPAbortOnClose": 0}
write("fires.jsonl", [snap("2025-03-02T12:00:00Z", prev, c0), snap("2025-03-02T12:00:05Z", cur, c1)])

# quiet: the gateway keeps 4 SMTP sessions open (RSET between mails); a
# few old TIME_WAIT sockets from a restart.
q = [sock("TIME-WAIT", 60000 + i, 1000 + i) for i in range(3)] + [sock("ESTAB", 60150 + i, 1150 + i) for i in range(4)]
write("quiet.jsonl", [snap("2025-03-02T12:00:00Z", q, c0), snap("2025-03-02T12:00:05Z", q, dict(c0))])

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

A Go client (billing, pid 5200) that never closes response bodies: the
server 198.18.4.2:443 closes idle connections, they stay in CLOSE_WAIT
with the server's last bytes unread. 40 -> 52 in 5 s, 40 of them old."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}
SYS = {"net.ipv4.ip_local_port_range": "32768 60999"}

def sock(state, port, cookie, recvq=0):
    return {"family": 2, "state": state, "local": "198.18.1.9:%d" % port, "remote": "198.18.4.2:443",
            "recv_q": recvq, "send_q": 0, "uid": 1000, "inode": 8000 + cookie, "cookie": cookie, "pids": [5200]}

def snap(taken, socks, fds):
    return {"taken": taken, "host": "app1", "kernel": "6.18.0", "netns": {"name": "host"},
            "sockets": socks, "sysctls": SYS,
            "procs": {"5200": {"pid": 5200, "command": "billing", "fds": fds, "nofile_soft": 1024, "nofile_hard": 524288}}}

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

est = [sock("ESTAB", 45000 + i, 100 + i) for i in range(8)]
cw0 = [sock("CLOSE-WAIT", 40000 + i, 1000 + i, 31) for i in range(40)]
cw1 = cw0 + [sock("CLOSE-WAIT", 40040 + i, 1040 + i, 31) for i in range(12)]
write("fires.jsonl", [snap("2025-03-02T13:00:00Z", est + cw0, 60), snap("2025-03-02T13:00:05Z", est + cw1, 72)])
# quiet: two sockets pass through CLOSE_WAIT briefly (different ones each sample).
write("quiet.jsonl", [snap("2025-03-02T13:00:00Z", est + [sock("CLOSE-WAIT", 40000, 1000)], 20),
                      snap("2025-03-02T13:00:05Z", est + [sock("CLOSE-WAIT", 40001, 1001)], 20)])

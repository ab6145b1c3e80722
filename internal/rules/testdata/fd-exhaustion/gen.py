#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

A Java server (pid 6100) started with the default soft limit 1024: 900 ->
980 descriptors in 5 s, 30 of its sockets in CLOSE_WAIT."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}

def sock(state, i, pid):
    return {"family": 2, "state": state, "local": "198.18.1.11:8443", "remote": "198.18.0.%d:%d" % (20 + i % 50, 50000 + i),
            "recv_q": 0, "send_q": 0, "uid": 1000, "inode": 9000 + i, "cookie": 9000 + i, "pids": [pid]}

def snap(taken, fds, soft, filenr, ncw):
    socks = [sock("ESTAB", i, 6100) for i in range(20)] + [sock("CLOSE-WAIT", 100 + i, 6100) for i in range(ncw)]
    return {"taken": taken, "host": "api1", "kernel": "6.18.0", "netns": {"name": "host"}, "sockets": socks,
            "sysctls": {"fs.file-nr": filenr, "fs.file-max": "9223372036854775807"},
            "procs": {"6100": {"pid": 6100, "command": "java", "fds": fds, "nofile_soft": soft, "nofile_hard": 4096}}}

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

write("fires.jsonl", [snap("2025-03-02T14:00:00Z", 900, 1024, "4128 0 9223372036854775807", 28),
                      snap("2025-03-02T14:00:05Z", 980, 1024, "4208 0 9223372036854775807", 30)])
write("quiet.jsonl", [snap("2025-03-02T14:00:00Z", 400, 65536, "4128 0 9223372036854775807", 0),
                      snap("2025-03-02T14:00:05Z", 410, 65536, "4138 0 9223372036854775807", 0)])

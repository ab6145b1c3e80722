#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate fires.jsonl and quiet.jsonl: python3 gen.py (from this dir).

The shape of a real capture (tcpdoctor record --netns capx --interval 3s,
internal/testkit/corpus's "nginx at worker_connections" case): nginx master
10862 and its one worker 10866 (worker_connections 256, read from
/tmp/capx/nginx.conf:5) proxy 127.0.0.1:8080 to a slow upstream on
127.0.0.1:9000 (python3 pid 23599) for 400 clients (python3 pid 23782).
The worker holds 127 clients and their 127 upstream connections and its
listener, and closes every other client right after accepting it: the
eBPF source counts 3344 accepted connections it closed first and 3550
resets sent from port 8080 in 3 s, and the clients received 3685. Trimmed: 20 of the 4052 TIME_WAIT
sockets kept. quiet.jsonl is the same nginx under 90 clients: 181 of
256 connections, nobody turned away."""
import json

HDR = {"format": "tcpdoctor-snapshot", "version": 1}
LST, UP = "127.0.0.1:8080", "127.0.0.1:9000"
MASTER, WORKER, UPSTREAM, CLIENT = 10862, 10866, 23599, 23782

def sk(state, local, remote, cookie, pids=(), expires=0):
    s = {"family": 2, "state": state, "local": local, "remote": remote, "recv_q": 0, "send_q": 511 if state == "LISTEN" else 0,
         "uid": 65534 if pids and pids[-1] == WORKER else 0, "inode": cookie if pids else 0, "cookie": cookie, "pids": list(pids)}
    if expires:
        s["timer"], s["expires_ms"] = 3, expires
    return s

def snap(taken, n, first, ebpf, tw_young):
    socks = [sk("LISTEN", LST, "0.0.0.0:0", 1, (MASTER, WORKER)), sk("LISTEN", UP, "0.0.0.0:0", 2, (UPSTREAM,))]
    for i in range(n):
        c = first + i
        cport, uport = 40000 + c % 20000, 50000 + c % 10000
        socks += [sk("ESTAB", LST, "127.0.0.1:%d" % cport, 100000 + c, (WORKER,)),
                  sk("ESTAB", "127.0.0.1:%d" % cport, LST, 200000 + c, (CLIENT,)),
                  sk("ESTAB", "127.0.0.1:%d" % uport, UP, 300000 + c, (WORKER,)),
                  sk("ESTAB", UP, "127.0.0.1:%d" % uport, 400000 + c, (UPSTREAM,))]
    # TIME_WAIT on the listener's side: the server closed first; the
    # young ones (60 s less under 3 s left) in the window.
    for i in range(20):
        young = i < tw_young
        socks.append(sk("TIME-WAIT", LST, "127.0.0.1:%d" % (30000 + i), 900000 + i + (0 if young else 1000), (), 58500 if young else 20000))
    s = {"taken": taken, "host": "lab", "kernel": "6.18.0", "netns": {"name": "capx"}, "sockets": socks,
         "counters": {"Tcp.OutRsts": ebpf["outrsts"], "Tcp.PassiveOpens": ebpf["passive"]},
         "procs": {str(MASTER): {"pid": MASTER, "command": "nginx", "fds": 9, "nofile_soft": 1024, "nofile_hard": 524288},
                   str(WORKER): {"pid": WORKER, "command": "nginx", "fds": 2 * n + 8, "nofile_soft": 1024, "nofile_hard": 524288},
                   str(UPSTREAM): {"pid": UPSTREAM, "command": "python3", "fds": n + 4, "nofile_soft": 1024, "nofile_hard": 524288},
                   str(CLIENT): {"pid": CLIENT, "command": "python3", "fds": n + 4, "nofile_soft": 1024, "nofile_hard": 524288}},
         "app_caps": [{"pid": MASTER, "command": "nginx", "app": "nginx", "setting": "worker_connections", "value": 256,
                       "source": "/tmp/capx/nginx.conf:5", "per": "process", "pids": [WORKER],
                       "related": [{"name": "config", "value": "/tmp/capx/nginx.conf", "source": "its -c (/proc/PID/cmdline)"},
                                   {"name": "worker_processes", "value": "1", "source": "/tmp/capx/nginx.conf:1"}]}]}
    if ebpf.get("flows") is not None:
        s["bpf"] = {"since": ebpf["since"], "until": taken, "flows": ebpf["flows"], "resets": ebpf["resets"]}
    return s

def write(name, snaps):
    with open(name, "w") as f:
        f.write(json.dumps(HDR) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")

T0, T1 = "2026-11-27T01:42:27.329Z", "2026-11-27T01:42:30.330Z"
fires_bpf = {"since": T0, "outrsts": 481213, "passive": 578881,
             "flows": [{"pid": WORKER, "command": "nginx", "remote": "0.0.0.0:0", "local_port": 8080, "active_closes": 3344},
                       {"pid": WORKER, "command": "nginx", "remote": UP, "opens": 10, "active_closes": 1}],
             "resets": [{"sent": True, "reason": "TCP_TIMEWAIT_SOCKET", "remote": "127.0.0.1:0", "local_port": 8080, "count": 3145},
                        {"sent": True, "reason": "TCP_ABORT_ON_DATA", "remote": "127.0.0.1:0", "local_port": 8080, "count": 405},
                        {"sent": False, "remote": LST, "count": 3685}]}
write("fires.jsonl", [snap(T0, 121, 0, {"outrsts": 477528, "passive": 575377}, 0),
                      snap(T1, 127, 6, fires_bpf, 2)])
quiet_bpf = {"since": T0, "outrsts": 1000, "passive": 2090,
             "flows": [{"pid": WORKER, "command": "nginx", "remote": "0.0.0.0:0", "local_port": 8080, "active_closes": 0}],
             "resets": []}
write("quiet.jsonl", [snap(T0, 90, 0, {"outrsts": 1000, "passive": 2000}, 0),
                      snap(T1, 90, 0, quiet_bpf, 0)])

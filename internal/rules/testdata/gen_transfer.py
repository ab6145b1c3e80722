#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the fixtures of the transfer rules (sndbuf-limited, rwnd-limited,
slow-reader, connection-bottleneck, retransmissions, buffer-limits).

The numbers follow what Linux 6.18 reports for the lab's cases (docs/lab.md):
20 ms RTT, 1448-byte MSS, doubled SO_SNDBUF/SO_RCVBUF, chronographs in
microseconds. Run from internal/rules: python3 testdata/gen_transfer.py
"""
import copy, json, os

T0 = "2025-06-01T10:00:00Z"
T1 = "2025-06-01T10:00:05Z"  # 5 s window

SYSCTLS = {
    "net.core.wmem_max": "212992", "net.core.rmem_max": "212992",
    "net.ipv4.tcp_wmem": "4096 16384 4194304", "net.ipv4.tcp_rmem": "4096 131072 6291456",
    "net.ipv4.tcp_moderate_rcvbuf": "1", "net.ipv4.tcp_window_scaling": "1",
    "net.ipv4.tcp_sack": "1", "net.ipv4.tcp_slow_start_after_idle": "1",
    "net.ipv4.tcp_mem": "22416 29888 44832",
}
COUNTERS = {
    "Tcp.OutSegs": 50_000_000, "Tcp.RetransSegs": 20_000, "Tcp.ActiveOpens": 9000,
    "TcpExt.TCPLostRetransmit": 10, "TcpExt.TCPTimeouts": 300, "TcpExt.TCPSynRetrans": 40,
    "TcpExt.TCPToZeroWindowAdv": 100, "TcpExt.TCPWantZeroWindowAdv": 400,
    "TcpExt.TCPZeroWindowDrop": 0, "TcpExt.TCPFromZeroWindowAdv": 100,
}


def info(**kw):
    ti = {"len": 248, "state": 1, "ca_state": 0, "options": 7, "snd_wscale": 7, "rcv_wscale": 7,
          "rto": 220000, "ato": 40000, "snd_mss": 1448, "rcv_mss": 1448, "advmss": 1448, "pmtu": 1500,
          "rtt": 20400, "rttvar": 300, "min_rtt": 20100, "snd_ssthresh": 2147483647, "snd_cwnd": 10,
          "unacked": 0, "bytes_acked": 0, "bytes_sent": 0, "bytes_received": 0, "bytes_retrans": 0,
          "total_retrans": 0, "delivery_rate": 0, "busy_time": 0, "rwnd_limited": 0, "sndbuf_limited": 0,
          "snd_wnd": 3145728, "rcv_wnd": 65535, "notsent_bytes": 0, "last_data_sent": 10, "last_data_recv": 10,
          "last_ack_recv": 10, "rcv_space": 14480}
    ti.update(kw)
    return ti


def mem(**kw):
    m = {"rmem_alloc": 0, "rcvbuf": 131072, "wmem_alloc": 0, "sndbuf": 87040, "fwd_alloc": 0,
         "wmem_queued": 0, "optmem": 0, "backlog": 0, "drops": 0}
    m.update(kw)
    return m


def sock(local, remote, cookie, pids, ti, m, state="ESTAB", recv_q=0, send_q=0, **kw):
    fam = 10 if local.startswith("[") else 2
    s = {"family": fam, "state": state, "local": local, "remote": remote, "recv_q": recv_q,
         "send_q": send_q, "uid": 1000, "inode": 100000 + cookie % 1000, "cookie": cookie, "cc": "bbr",
         "tcp_info": ti, "mem": m, "pids": pids}
    s.update(kw)
    return s


def listen(local, cookie, pids, backlog=4096):
    return {"family": 2, "state": "LISTEN", "local": local, "remote": "0.0.0.0:0", "recv_q": 0,
            "send_q": backlog, "uid": 1000, "inode": 90000 + cookie % 1000, "cookie": cookie, "pids": pids}


def snap(taken, sockets, procs, counters=None, sysctls=None):
    return {"taken": taken, "host": "app1", "kernel": "6.18.0", "netns": {"name": "host"},
            "sockets": sockets, "counters": counters or COUNTERS, "sysctls": sysctls or SYSCTLS,
            "sockstat": {"TCP.inuse": len(sockets), "TCP.tw": 3},
            "procs": {str(p): {"pid": p, "command": c, "fds": 120} for p, c in procs.items()}}


def write(rule, name, snaps):
    os.makedirs(os.path.join("testdata", rule), exist_ok=True)
    with open(os.path.join("testdata", rule, name), "w") as f:
        f.write(json.dumps({"format": "tcpdoctor-snapshot", "version": 1, "tool": "gen_transfer.py"}) + "\n")
        for s in snaps:
            f.write(json.dumps(s, separators=(",", ":")) + "\n")


def bump(c, **d):
    c = dict(c)
    for k, v in d.items():
        c[k.replace("__", ".")] = c[k.replace("__", ".")] + v
    return c


# A healthy autotuned 1 Gbit/s bulk sender at 20 ms (941 Mbit/s measured):
# sndbuf grew to the tcp_wmem maximum, cwnd well above what is in flight.
def bulk(taken_idx, cookie=7001, port=41300, peer="198.18.1.2:5432", pid=5151):
    acked = 3_000_000_000 + taken_idx * 588_000_000
    busy = 60_000_000 + taken_idx * 5_000_000
    return sock(f"198.18.0.1:{port}", peer, cookie, [pid],
                info(snd_cwnd=3400, unacked=1750, bytes_acked=acked, bytes_sent=acked + 2_534_000,
                     delivery_rate=117_600_000, busy_time=busy, snd_wnd=6_291_456, rtt=21300,
                     data_segs_out=acked // 1448),
                mem(sndbuf=4194304, wmem_queued=4_180_000, wmem_alloc=300_000), send_q=3_900_000)


# C3: SO_SNDBUF 16K (sndbuf 32K) over 20 ms: ~46 segments in flight, busy
# 100 %, sndbuf_limited 0, cwnd far larger, ~28 Mbit/s.
def pinned(i, busy_on=True, cookie=7000):
    acked = 100_000_000 + i * (17_500_000 if busy_on else 0)
    busy = 40_000_000 + i * (5_000_000 if busy_on else 0)
    if busy_on:
        ti = info(snd_cwnd=300, unacked=46, bytes_acked=acked, bytes_sent=acked + 66_608,
                  delivery_rate=3_600_000, busy_time=busy, snd_wnd=3_145_728, notsent_bytes=0,
                  delivery_rate_app_limited=True)
        m = mem(sndbuf=32768, wmem_queued=69_632, wmem_alloc=8_192)
        sq = 66_608
    else:
        ti = info(snd_cwnd=300, unacked=0, bytes_acked=acked, bytes_sent=acked, delivery_rate=3_600_000,
                  busy_time=busy, last_data_sent=4000)
        m = mem(sndbuf=32768)
        sq = 0
    return sock("198.18.0.1:41234", "198.18.1.2:5432", cookie, [4242], ti, m, send_q=sq)


PROCS = {4242: "java", 5151: "pg_dump"}


def sndbuf_limited():
    # fires.jsonl is a real capture, not generated: the pinned 16K sender of
    # `tcpdoctor lab run c3-pinned-sndbuf` at 1 Gbit/s, 20 ms, recorded with
    # `tcpdoctor record --netns <its client ns> --interval 2s --count 2`.
    write("sndbuf-limited", "quiet.jsonl",
          [snap(T0, [pinned(0, False), bulk(0)], PROCS), snap(T1, [pinned(1, False), bulk(1)], PROCS)])


# C5: a server sending a large response to a client whose receive buffer is
# pinned at 128K (rcvbuf 256K, window about 128K) over 20 ms; and, on
# loopback, redis-server feeding a worker with SO_RCVBUF 32K that reads
# slowly (Recv-Q full, zero windows).
def window_case(i, bad=True):
    acked = 500_000_000 + i * 32_800_000
    busy = 90_000_000 + i * 5_000_000
    rwnd = 80_000_000 + i * (4_750_000 if bad else 100_000)
    srv = sock("198.18.1.2:8080", "198.18.0.7:51000", 8100, [700],
               info(snd_cwnd=400, unacked=90 if bad else 400, bytes_acked=acked, bytes_sent=acked + 130_000,
                    delivery_rate=6_500_000, busy_time=busy, rwnd_limited=rwnd,
                    snd_wnd=131_072 if bad else 4_194_304),
               mem(sndbuf=2_506_752, wmem_queued=2_400_000), send_q=2_000_000)
    lo_acked = 20_000_000 + i * 1_500_000
    lo_busy = 30_000_000 + i * 5_000_000
    lo_rwnd = 25_000_000 + i * (4_500_000 if bad else 50_000)
    red = sock("127.0.0.1:6379", "127.0.0.1:40000", 8200, [300],
               info(snd_cwnd=10, unacked=1 if bad else 5, rtt=60, min_rtt=20, snd_mss=32741, bytes_acked=lo_acked,
                    bytes_sent=lo_acked + 2896, delivery_rate=300_000, busy_time=lo_busy, rwnd_limited=lo_rwnd,
                    snd_wnd=2896 if bad else 1_048_576, rto=201000),
               mem(sndbuf=2_626_560, wmem_queued=1_100_000), send_q=900_000)
    q = (30_000 + 1000 * i) if bad else (0 if i else 24_000)
    wrk = sock("127.0.0.1:40000", "127.0.0.1:6379", 8201, [400],
               info(bytes_received=lo_acked, rtt=60, min_rtt=20, rcv_mss=32741, rcv_wnd=0 if bad else 1_048_576,
                    last_data_recv=2),
               mem(rcvbuf=65_536 if bad else 2_097_152, rmem_alloc=int(q * 2.07)), recv_q=q)
    return [srv, red, wrk, listen("198.18.1.2:8080", 8000, [700]), listen("127.0.0.1:6379", 8001, [300])]


WPROCS = {700: "java", 300: "redis-server", 400: "worker", 1200: "java"}


def window_counters(i, bad=True):
    k = i if bad else 0
    return bump(COUNTERS, TcpExt__TCPWantZeroWindowAdv=350 * k, TcpExt__TCPToZeroWindowAdv=120 * k,
                TcpExt__TCPFromZeroWindowAdv=118 * k)


def rwnd_limited():
    for name, bad in (("fires.jsonl", True), ("quiet.jsonl", False)):
        write("rwnd-limited", name, [snap(T, window_case(i, bad), WPROCS, window_counters(i, bad))
                                     for i, T in enumerate((T0, T1))])


# C1 at large buffers: a Dubbo consumer whose single IO thread cannot keep
# up with the provider's large responses; its Recv-Q piles up (autotuned
# rcvbuf 6M).
def consumer(i, bad=True):
    q = (3_000_000 + 200_000 * i) if bad else (2_500_000 if i == 0 else 1200)
    return sock("198.18.0.11:38000", "198.18.1.20:20880", 9100, [1200],
                info(bytes_received=800_000_000 + i * 40_000_000, rtt=20400, rcv_wnd=1_200_000, snd_cwnd=40),
                mem(rcvbuf=6_291_456, rmem_alloc=int(q * 1.15)), recv_q=q)


def slow_reader():
    for name, bad in (("fires.jsonl", True), ("quiet.jsonl", False)):
        write("slow-reader", name, [snap(T, window_case(i, bad) + [consumer(i, bad)], WPROCS, window_counters(i, bad))
                                    for i, T in enumerate((T0, T1))])


# A lossy path to one peer: 5 % of bytes retransmitted, one connection in
# RTO backoff; host-wide 3 % of segments.
def lossy(i, bad=True):
    sent = 900_000_000 + i * 50_000_000
    rtx = 20_000_000 + i * (2_500_000 if bad else 20_000)
    c = sock("198.18.0.1:45000", "203.0.113.9:443", 9300, [2100],
             info(snd_cwnd=12, unacked=20, bytes_sent=sent, bytes_acked=sent - rtx - 30_000, bytes_retrans=rtx,
                  total_retrans=rtx // 1448, lost=6 if bad else 0, backoff=1 if bad else 0,
                  rto=880000 if bad else 220000, delivery_rate=9_000_000, busy_time=100_000_000 + i * 5_000_000),
             mem(sndbuf=1_048_576, wmem_queued=400_000), send_q=300_000)
    ok = sock("198.18.0.1:45100", "198.18.1.2:5432", 9301, [2100],
              info(snd_cwnd=200, unacked=0, bytes_sent=40_000_000 + i * 20_000_000, bytes_acked=40_000_000 + i * 20_000_000,
                   bytes_retrans=2000, delivery_rate=50_000_000),
              mem())
    return [c, ok]


def retransmissions():
    for name, bad in (("fires.jsonl", True), ("quiet.jsonl", False)):
        snaps = []
        for i, T in enumerate((T0, T1)):
            c = bump(COUNTERS, Tcp__OutSegs=200_000 * i, Tcp__RetransSegs=(6000 if bad else 40) * i,
                     TcpExt__TCPLostRetransmit=(40 if bad else 0) * i, TcpExt__TCPTimeouts=(120 if bad else 1) * i,
                     TcpExt__TCPSynRetrans=(3 if bad else 0) * i)
            snaps.append(snap(T, lossy(i, bad), {2100: "curl"}, c))
        write("retransmissions", name, snaps)


# Host settings: receive autotuning off, and a socket whose SO_SNDBUF was
# capped at 2 x wmem_max; the quiet host has defaults.
def buffer_limits():
    bad = dict(SYSCTLS, **{"net.ipv4.tcp_moderate_rcvbuf": "0"})
    capped = sock("198.18.0.1:46000", "198.18.1.2:5432", 9400, [4242],
                  info(snd_cwnd=300, unacked=150, bytes_acked=5_000_000, delivery_rate=20_000_000,
                       delivery_rate_app_limited=True),
                  mem(sndbuf=425_984, wmem_queued=420_000), send_q=400_000)
    write("buffer-limits", "fires.jsonl", [snap(T1, [capped, bulk(1)], PROCS, sysctls=bad)])
    write("buffer-limits", "quiet.jsonl", [snap(T1, [pinned(1, False), bulk(1)], PROCS)])


# C1 with 32K buffers: one Dubbo consumer connection to a provider, busy
# all the window, 40 % waiting for the provider's window and Send-Q stuck at
# its 64K sndbuf. The quiet host uses a pool of 4 lightly loaded ones.
def dubbo(i, pool=1, bad=True):
    out = []
    for c in range(pool):
        acked = 300_000_000 + i * (9_000_000 if bad else 1_000_000)
        busy = 200_000_000 + i * (5_000_000 if bad else 900_000)
        rwnd = 70_000_000 + i * (2_000_000 if bad else 10_000)
        out.append(sock(f"198.18.0.11:{38000 + c}", "198.18.1.20:20880", 9500 + c, [1200],
                        info(snd_cwnd=120, unacked=44 if bad else 3, bytes_acked=acked, bytes_sent=acked + 60_000,
                             busy_time=busy, rwnd_limited=rwnd, delivery_rate=1_800_000, snd_wnd=65_536,
                             bytes_received=900_000_000 + i * 9_000_000),
                        mem(sndbuf=65_536, wmem_queued=64_000 if bad else 4_000, rcvbuf=65_536,
                            rmem_alloc=2_000), send_q=(63_000 + 500 * i) if bad else 4_000))
    return out


def connection_bottleneck():
    write("connection-bottleneck", "fires.jsonl", [snap(T, dubbo(i), {1200: "java"}) for i, T in enumerate((T0, T1))])
    write("connection-bottleneck", "quiet.jsonl", [snap(T, dubbo(i, 4, False), {1200: "java"}) for i, T in enumerate((T0, T1))])


if __name__ == "__main__":
    connection_bottleneck()
    retransmissions()
    buffer_limits()
    sndbuf_limited()
    rwnd_limited()
    slow_reader()

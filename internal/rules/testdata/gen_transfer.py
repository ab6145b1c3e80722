#!/usr/bin/env python3
"""Writes the fixtures of the transfer rules (sndbuf-limited, rwnd-limited,
slow-reader, connection-bottleneck, retransmissions, buffer-limits).

The numbers follow what Linux 6.18 reports for the lab's cases (design.md,
cases.md): 20 ms RTT, 1448-byte MSS, doubled SO_SNDBUF/SO_RCVBUF, chronographs
in microseconds. Run from internal/rules: python3 testdata/gen_transfer.py
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
    write("sndbuf-limited", "fires.jsonl",
          [snap(T0, [pinned(0), bulk(0)], PROCS), snap(T1, [pinned(1), bulk(1)], PROCS)])
    write("sndbuf-limited", "quiet.jsonl",
          [snap(T0, [pinned(0, False), bulk(0)], PROCS), snap(T1, [pinned(1, False), bulk(1)], PROCS)])


if __name__ == "__main__":
    sndbuf_limited()

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Cut the fixtures from a real capture (Linux 6.18):

  LIVETEST_RECORD=/tmp/rec go test ./internal/testkit/livetest -run TestSynQueueOverflow
  python3 cut.py /tmp/rec/syn-queue-overflow-cookies0.jsonl

fires.jsonl: the capture with the listener, its SYN-RECV requests and a few
of the 60 clients (ESTAB: handshake done on their side; SYN-SENT: SYN
dropped). quiet.jsonl: the same host after the clients left: no requests,
counters still.
"""
import copy, json, sys

KEEP = ("TcpExt.ListenDrops", "TcpExt.ListenOverflows", "TcpExt.TCPReqQFullDrop",
        "TcpExt.TCPReqQFullDoCookies", "TcpExt.SyncookiesSent", "TcpExt.SyncookiesRecv",
        "TcpExt.SyncookiesFailed", "Tcp.ActiveOpens", "Tcp.PassiveOpens", "TcpExt.TCPDeferAcceptDrop")

lines = open(sys.argv[1]).read().splitlines()
snaps = [json.loads(l) for l in lines[1:]]
out = []
for s in snaps:
    s["netns"] = {"name": "synq-demo"}
    s["host"] = "ws1"
    s["counters"] = {k: v for k, v in s["counters"].items() if k in KEEP}
    s.pop("sources", None)
    s.pop("errors", None)
    s.pop("sockstat", None)
    keep, n = [], {"ESTAB": 0, "SYN-SENT": 0}
    for sk in s["sockets"]:
        st = sk["state"]
        if st in n:
            n[st] += 1
            if n[st] > 3:
                continue
        keep.append(sk)
    s["sockets"] = keep
    out.append(s)
hdr = lines[0]
with open("fires.jsonl", "w") as f:
    f.write(hdr + "\n")
    for s in out:
        f.write(json.dumps(s, separators=(",", ":")) + "\n")
quiet = []
for s in out:
    q = copy.deepcopy(s)
    q["sockets"] = [sk for sk in q["sockets"] if sk["state"] == "LISTEN"]
    q["counters"] = out[0]["counters"]
    quiet.append(q)
with open("quiet.jsonl", "w") as f:
    f.write(hdr + "\n")
    for s in quiet:
        f.write(json.dumps(s, separators=(",", ":")) + "\n")

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run inside a fresh namespace by regen.sh: a listener (backlog 8, never
accepts) hit by 40 connects spread over 3 s; a bulk flow into a reader
with a pinned 16K SO_RCVBUF that reads slowly; 20 short connections the
client closes first (TIME_WAIT). Prints "ready", runs about 6 s, exits."""
import socket, threading, time

def full_listener():
    l = socket.socket(); l.bind(("127.0.0.1", 8080)); l.listen(8)
    return l

def bulk():
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    srv.bind(("127.0.0.1", 9000)); srv.listen(16)
    cli = socket.create_connection(("127.0.0.1", 9000))
    conn, _ = srv.accept()
    stop = time.time() + 6
    def reader():
        while time.time() < stop:
            conn.recv(4096); time.sleep(0.002)
    threading.Thread(target=reader, daemon=True).start()
    buf = b"x" * 65536
    cli.settimeout(0.5)
    while time.time() < stop:
        try: cli.send(buf)
        except socket.timeout: pass
    return srv, cli, conn

def short():
    srv = socket.socket(); srv.bind(("127.0.0.1", 9001)); srv.listen(64)
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", 9001)); a, _ = srv.accept()
        c.close(); a.recv(1); a.close()
    return srv

l = full_listener(); s = short()
print("ready", flush=True)
held = []
def hammer():
    for _ in range(40):
        c = socket.socket(); c.setblocking(False)
        try: c.connect(("127.0.0.1", 8080))
        except BlockingIOError: pass
        held.append(c); time.sleep(0.075)
threading.Thread(target=hammer, daemon=True).start()
bulk()

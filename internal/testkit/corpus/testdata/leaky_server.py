# SPDX-License-Identifier: Apache-2.0
"""A server that forgets close(): it accepts, reads the request and keeps
the socket, so every connection the client closes stays in CLOSE_WAIT.
Usage: leaky_server.py PORT SECONDS (exits by itself after SECONDS)."""
import socket
import sys
import time

port, secs = int(sys.argv[1]), float(sys.argv[2])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(128)
ls.settimeout(0.2)
held = []  # the bug: accepted sockets are kept and never closed
end = time.monotonic() + secs
while time.monotonic() < end:
    try:
        c, _ = ls.accept()
    except socket.timeout:
        continue
    c.settimeout(1)
    try:
        c.recv(64)
    except OSError:
        pass
    held.append(c)
print(len(held), flush=True)

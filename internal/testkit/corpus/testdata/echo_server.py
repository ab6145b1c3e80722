# SPDX-License-Identifier: Apache-2.0
"""One request per connection: reads a byte, answers a byte, then waits
for the client to close first and closes too.
Usage: echo_server.py HOST PORT SECONDS (exits by itself after SECONDS)."""
import socket
import sys
import time

host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(1024)
ls.settimeout(0.2)
served = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    try:
        c, _ = ls.accept()
    except socket.timeout:
        continue
    c.settimeout(1)
    try:
        if c.recv(1):
            c.sendall(b"y")
            c.recv(1)  # EOF: the client closed first
        served += 1
    except OSError:
        pass
    c.close()
print(served, flush=True)

# SPDX-License-Identifier: Apache-2.0
"""A slow HTTP upstream: reads each request, waits DELAY seconds, answers
200 "ok" and closes; a thread per connection. Exits after LIFE seconds.
Usage: slow_upstream.py HOST PORT DELAY LIFE; prints "ready" once listening."""
import socket
import sys
import threading
import time

host, port, delay, life = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen(4096)


def serve(c):
    try:
        c.settimeout(30)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(4096)
            if not d:
                return
            buf += d
        time.sleep(delay)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
    except OSError:
        pass
    finally:
        c.close()


end = time.time() + life
s.settimeout(0.5)
print("ready", flush=True)
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()

# SPDX-License-Identifier: Apache-2.0
"""Short connections at a fixed rate: connect, send a byte, read the
answer, close (the client closes first, so it holds TIME_WAIT; with
"linger0", SO_LINGER 0 makes each close a reset and leaves no TIME_WAIT).
Failed connects are counted by errno and the client goes on.
Usage: churn_client.py HOST PORT PER_SECOND SECONDS [linger0]; prints a
JSON summary."""
import errno
import json
import socket
import struct
import sys
import time

host, port, rate, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
linger0 = len(sys.argv) > 5 and sys.argv[5] == "linger0"
ok, errors, first_error = 0, {}, None
t0 = time.monotonic()
i = 0
while True:
    due = t0 + i / rate
    now = time.monotonic()
    if due - t0 >= secs:
        break
    if due > now:
        time.sleep(due - now)
    i += 1
    s = socket.socket()
    s.settimeout(2)
    if linger0:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        s.connect((host, port))
        s.sendall(b"x")
        s.recv(1)
        ok += 1
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
        errors[name] = errors.get(name, 0) + 1
        if first_error is None:
            first_error = round(time.monotonic() - t0, 2)
    finally:
        s.close()
print(json.dumps({"attempts": i, "ok": ok, "errors": errors,
                  "first_error_s": first_error,
                  "seconds": round(time.monotonic() - t0, 2)}), flush=True)

# SPDX-License-Identifier: Apache-2.0
"""N clients, each sending one HTTP request at a time (Connection: close)
to HOST:PORT and waiting for the whole answer, for SECONDS; a client whose
request fails waits RETRY seconds before it tries again, one that got its
answer goes on at once. Prints a JSON summary: answers, and failures by
kind ("closed without answer": the server closed before answering,
"reset", "refused", "timeout", "answer NNN" for a status other than 200).
A client gives up on an answer after WAIT seconds (default 30) and closes.
Usage: hold_clients.py HOST PORT N SECONDS RETRY [WAIT]"""
import asyncio
import json
import sys
import time

host, port, n, seconds, retry = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
wait = float(sys.argv[6]) if len(sys.argv) > 6 else 30.0
out = {"clients": n, "ok": 0, "errors": {}}


def err(k):
    out["errors"][k] = out["errors"].get(k, 0) + 1


async def one(end):
    while time.monotonic() < end:
        w = None
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            w.write(b"GET / HTTP/1.1\r\nHost: corpus\r\nConnection: close\r\n\r\n")
            await w.drain()
            data = await asyncio.wait_for(r.read(), wait)
            if data.startswith(b"HTTP/1.1 200"):
                out["ok"] += 1
                continue
            err("closed without answer" if not data else "answer " + data[9:12].decode(errors="replace"))
        except ConnectionResetError:
            err("reset")
        except ConnectionRefusedError:
            err("refused")
        except asyncio.TimeoutError:
            err("timeout")
        except OSError as e:
            err(type(e).__name__)
        finally:
            if w is not None:
                w.close()
        await asyncio.sleep(retry)


async def main():
    end = time.monotonic() + seconds
    await asyncio.gather(*(one(end) for _ in range(n)))


t0 = time.monotonic()
asyncio.run(main())
out["seconds"] = round(time.monotonic() - t0, 1)
print(json.dumps(out))

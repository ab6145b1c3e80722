# SPDX-License-Identifier: Apache-2.0
"""N memcached clients, each keeping one connection and sending
"get corpus:none" every 0.5 s for SECONDS, as an application's cache
clients do. A client whose connection is refused, closed or answered
"ERROR Too many open connections" reconnects RETRY seconds later.
Prints a JSON summary: "ok" answers and the failures by kind ("too many":
memcached's own turn-away).
Usage: memcached_clients.py HOST PORT N SECONDS RETRY"""
import asyncio
import json
import sys
import time

host, port, n, seconds, retry = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
out = {"clients": n, "ok": 0, "errors": {}}
GET = b"get corpus:none\r\n"


def err(k):
    out["errors"][k] = out["errors"].get(k, 0) + 1


async def one(end):
    while time.monotonic() < end:
        w = None
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            while time.monotonic() < end:
                w.write(GET)
                await w.drain()
                line = await asyncio.wait_for(r.readline(), 5)
                if line == b"END\r\n":
                    out["ok"] += 1
                    await asyncio.sleep(0.5)
                    continue
                if not line:
                    err("closed")
                elif b"Too many open connections" in line:
                    err("too many")
                else:
                    err("other: " + line[:40].decode(errors="replace").strip())
                break
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

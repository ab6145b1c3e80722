# SPDX-License-Identifier: Apache-2.0
"""N Redis clients, each keeping one connection and blocking on
BLPOP KEY 2 (an empty list: the answer is a nil after 2 s) again and
again for SECONDS, as a worker waiting on a queue does. A client whose
connection is refused, closed or answered with an error reconnects
RETRY seconds later. Prints a JSON summary: "ok" answers and the
failures by kind ("max clients": -ERR max number of clients reached).
Usage: redis_clients.py HOST PORT N SECONDS RETRY"""
import asyncio
import json
import sys
import time

host, port, n, seconds, retry = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
out = {"clients": n, "ok": 0, "errors": {}}
BLPOP = b"*3\r\n$5\r\nBLPOP\r\n$11\r\ncorpus:none\r\n$1\r\n2\r\n"


def err(k):
    out["errors"][k] = out["errors"].get(k, 0) + 1


async def one(end):
    while time.monotonic() < end:
        w = None
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            while time.monotonic() < end:
                w.write(BLPOP)
                await w.drain()
                line = await asyncio.wait_for(r.readline(), 10)
                if line.startswith(b"*-1"):
                    out["ok"] += 1
                    continue
                if not line:
                    err("closed")
                elif b"max number of clients" in line:
                    err("max clients")
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

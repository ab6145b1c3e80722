#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerate fires.jsonl and quiet.jsonl as real captures (root):
#   sh internal/rules/testdata/connection-churn/gen.sh
# then: go test ./internal/rules -run TestFixtures -update, and update
# expect.json by hand (pids, rates and counts change with every capture).
#
# In a private network namespace (lo only) a python3 server on
# 127.0.0.1:8080 answers each line after 20 ms of "work".
#   fires: a python3 client (8 threads) opens about 300 connections/s:
#          connect, send a line, read the reply, close. The client closes
#          first, so every connection leaves one TIME_WAIT on its side;
#          about 6 are open at any instant (300/s x 20 ms), so the opener
#          is seen with its process at the sample.
#   quiet: the same server; the client keeps one connection open and sends
#          its requests on it (no TIME_WAIT at all).
# tcpdoctor record takes two samples 2 s apart, 0.3 s after the client's
# first connection. Only the processes started here are stopped, by their
# pid; the namespace is removed on exit.
set -eu

DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../../../.." && pwd)
NS=${NS:-tdchurn}   # fixed, so the fixture's netns name does not change
PY=${PYTHON:-python3}
RATE=300     # connections/s, fires
SECONDS_RUN=8

if [ "$(id -u)" != 0 ]; then
	echo "gen.sh: needs root (ip netns)" >&2
	exit 2
fi

if [ -e "/var/run/netns/$NS" ]; then
	echo "gen.sh: netns $NS exists (another run?); remove it or set NS=" >&2
	exit 2
fi

(cd "$ROOT" && go build -o bin/tcpdoctor ./cmd/tcpdoctor)
TD=$ROOT/bin/tcpdoctor

PIDS=""
cleanup() {
	for p in $PIDS; do
		kill "$p" 2>/dev/null || true
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null || true
	done
	ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip netns exec "$NS" ip link set lo up

SERVER='
import socketserver, sys, time
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:          # until the client closes
            time.sleep(0.02)             # 20 ms of work per request
            self.wfile.write(b"OK " + line)
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 1024
S(("127.0.0.1", 8080), H).serve_forever()
'

# argv: mode (churn|keep), rate, seconds
CLIENT='
import socket, sys, threading, time
mode, rate, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + secs
def request(f, s):
    s.sendall(b"GET /\n")
    if not f.readline():
        raise SystemExit("server closed")
def churn(period):
    t = time.monotonic()
    while t < end:
        with socket.create_connection(("127.0.0.1", 8080)) as s:
            with s.makefile("rb") as f:
                request(f, s)
        t += period                      # then close: the client closes first
        d = t - time.monotonic()
        if d > 0:
            time.sleep(d)
if mode == "churn":
    n = 8
    ts = [threading.Thread(target=churn, args=(n / rate,)) for _ in range(n)]
    for i, th in enumerate(ts):
        th.start()
        time.sleep(1 / rate)
    for th in ts:
        th.join()
else:
    with socket.create_connection(("127.0.0.1", 8080)) as s:
        f = s.makefile("rb")
        while time.monotonic() < end:
            request(f, s)
'

# wait_for ss-filter...: until ss in the namespace lists a socket (10 s).
wait_for() {
	i=0
	until [ -n "$(ip netns exec "$NS" ss -Htan "$@")" ]; do
		i=$((i + 1))
		[ $i -lt 100 ] || { echo "gen.sh: timed out waiting for ss -tan $*" >&2; exit 1; }
		sleep 0.1
	done
}

capture() { # mode output
	ip netns exec "$NS" "$PY" -c "$SERVER" &
	srv=$!
	PIDS="$PIDS $srv"
	wait_for state listening "( sport = :8080 )"
	ip netns exec "$NS" "$PY" -c "$CLIENT" "$1" "$RATE" "$SECONDS_RUN" &
	cli=$!
	PIDS="$PIDS $cli"
	wait_for state established "( dport = :8080 )"
	sleep 0.3
	"$TD" record --netns "$NS" --interval 2s --count 2 -o "$DIR/$2"
	wait "$cli"
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	PIDS=""
}

capture churn fires.jsonl
# A fresh namespace for the quiet run: no TIME_WAIT left from the first.
ip netns del "$NS"
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
capture keep quiet.jsonl

# Check the captures say what they are for (the opener may be caught
# with no connection open at a sample, rarely: then run again).
rc=0
"$TD" check --from "$DIR/fires.jsonl" --rule connection-churn --fail-on warning >/dev/null || rc=$?
[ "$rc" = 1 ] || { echo "gen.sh: fires.jsonl: connection-churn did not warn (exit $rc); run again" >&2; exit 1; }
"$TD" check --from "$DIR/quiet.jsonl" --rule connection-churn --fail-on info >/dev/null ||
	{ echo "gen.sh: quiet.jsonl: connection-churn reported something; run again" >&2; exit 1; }
ls -l "$DIR/fires.jsonl" "$DIR/quiet.jsonl"

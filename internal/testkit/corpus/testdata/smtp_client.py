# SPDX-License-Identifier: Apache-2.0
"""A mailer that opens a new SMTP session for every mail, as simple
scripts do with smtplib: connect, EHLO, MAIL, RCPT, DATA, QUIT, close
(the client closes first: it holds the TIME_WAIT). THREADS senders send
back to back (each session waits on Nagle and delayed ACKs: about 20 a
second per sender on loopback). Failed sessions are counted by errno and
the sender goes on after 50 ms.
Usage: smtp_client.py HOST PORT THREADS SECONDS; prints a JSON summary."""
import errno
import json
import smtplib
import sys
import threading
import time

host, port, threads, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
msg = "From: a@example.org\r\nTo: b@example.org\r\nSubject: t\r\n\r\nhello\r\n"
lock = threading.Lock()
state = {"attempts": 0, "ok": 0, "errors": {}, "first_error_s": None}
t0 = time.monotonic()


def sender():
    while time.monotonic() - t0 < secs:
        try:
            s = smtplib.SMTP(host, port, local_hostname="mailer.example.org", timeout=2)
            try:
                s.sendmail("a@example.org", ["b@example.org"], msg)
                s.quit()
            finally:
                s.close()
            err = None
        except (OSError, smtplib.SMTPException) as e:
            code = getattr(e, "errno", None)
            err = errno.errorcode.get(code, str(code)) if code else type(e).__name__
        with lock:
            state["attempts"] += 1
            if err is None:
                state["ok"] += 1
            else:
                state["errors"][err] = state["errors"].get(err, 0) + 1
                if state["first_error_s"] is None:
                    state["first_error_s"] = round(time.monotonic() - t0, 2)
        if err is not None:
            time.sleep(0.05)


ts = [threading.Thread(target=sender) for _ in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
state["seconds"] = round(time.monotonic() - t0, 2)
print(json.dumps(state), flush=True)

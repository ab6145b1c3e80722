# SPDX-License-Identifier: Apache-2.0
"""Python's own SMTP server (smtpd, in the standard library up to 3.11)
accepting every mail and discarding it.
Usage: smtp_server.py HOST PORT SECONDS (exits by itself after SECONDS)."""
import sys
import time
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import asyncore
    import smtpd


class Sink(smtpd.SMTPServer):
    def process_message(self, peer, mailfrom, rcpttos, data, **kwargs):
        return None


host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
Sink((host, port), None)
end = time.monotonic() + secs
while time.monotonic() < end:
    asyncore.loop(timeout=0.2, count=1)

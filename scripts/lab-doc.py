#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Assembles docs/lab.md from the full scenario outputs in docs/lab/*.txt."""
import re, subprocess

order = [l.split()[0] for l in subprocess.run(["bin/tcpdoctor", "lab", "list"], capture_output=True,
                                              text=True, check=True).stdout.splitlines()[1:]]
print('''# The lab: every case reproduced, diagnosed and fixed

`tcpdoctor lab` builds three network namespaces on one machine (client, router, server, joined by
veth pairs on 198.18.0.0/15), emulates a link in the router (a TUN delay line for RTT and loss,
`tbf` for rate and the bottleneck queue: docs/lab-link.md), runs the workload of a case as separate
processes (so the diagnosis names real pids and commands), runs the same diagnosis as `tcpdoctor
check` during the load, applies the fix, runs again, and prints a before/after table with a verdict.

```sh
sudo tcpdoctor lab list
sudo tcpdoctor lab run c3-pinned-sndbuf        # one scenario, full form
sudo tcpdoctor lab run all --quick             # every scenario, reduced (CI runs these)
sudo tcpdoctor lab run c5-small-rcvbuf --keep  # leave the namespaces for inspection
sudo tcpdoctor lab clean                       # remove what a killed run left
```

Each run exits non-zero when the expected finding did not appear before the fix, still appears
after it, or the fix did not help. Guarantees: traffic stays inside namespaces the lab creates
(198.18.0.0/15); every load is bounded in count and time (workloads also carry a hard
`--max-duration`); namespaces, links and workload processes are removed at the end, on failure and
on Ctrl-C; workloads die with the lab (PR_SET_PDEATHSIG); `lab clean` removes `tdlab-*` namespaces
whose owning lab process is gone and ends only the processes the lab recorded in
/run/tcpdoctor-lab, by PID, after checking they are still our executable.

The tables below are real output of `sudo bin/tcpdoctor lab run NAME` (full form) on the project's
2-core Linux 6.18 VM, copied by `scripts/lab-doc.sh` from the files in docs/lab/ (which hold the
complete output, progress lines included). Absolute figures vary from run to run; the shape (who
wins, by roughly how much) is what the lab asserts. Where this kernel differs from the case as
reported (the figures each scenario's notes quote), the scenario says so in its notes.

The quick forms (`--quick`, what `go test ./internal/lab` runs) must not depend on a quiet
machine. A check window judges two instants, and a busy machine can catch the writer or the delay
line off the CPU at one of them or stretch the window itself, so: c3-pinned-sndbuf gives the pinned
sender up to three windows and its client namespace a 16 MiB tcp_wmem maximum, so that an
autotuned sender held at 4 MiB by a load-stretched RTT does not make the fix look unfinished;
c2-port-exhaustion holds its clients long enough for a window five times its length. Measured:
every quick form reproduced in two runs beside two busy loops and in one beside four, on the
2-core VM.''')
for name in order:
    txt = open(f"docs/lab/{name}.txt").read()
    m = re.search(r"^== .*?(?=^verdict)", txt, re.S | re.M)
    body = m.group(0) if m else txt
    v = re.search(r"^verdict: .*$", txt, re.M)
    lines = body.splitlines()
    print(f"\n## {lines[0][3:]}\n\nCommand: `sudo bin/tcpdoctor lab run {name}` (full output: docs/lab/{name}.txt)\n")
    print("```")
    print("\n".join(lines[1:]).strip("\n"))
    print(v.group(0) if v else "")
    print("```")

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Assembles docs/lab.md from the full scenario outputs in docs/lab/*.txt."""
import re, subprocess

order = [l.split()[0] for l in subprocess.run(["bin/tcpdoctor-lab", "list"], capture_output=True,
                                              text=True, check=True).stdout.splitlines()[1:]]
print('''# The lab: every case reproduced, diagnosed and fixed

`tcpdoctor-lab`, a second binary beside tcpdoctor, builds three network namespaces on one machine
(client, router, server, joined by veth pairs on 198.18.0.0/15), emulates a link in the router (a
TUN delay line for RTT and loss, `tbf` for rate and the bottleneck queue: docs/lab-link.md), runs
the traffic of a case as separate processes (so the diagnosis names real pids and commands), has
tcpdoctor diagnose it during the load, applies the fix, runs again, and prints a before/after
table with a verdict.

```sh
go build -o bin/ ./cmd/tcpdoctor ./cmd/tcpdoctor-lab
sudo bin/tcpdoctor-lab list
sudo bin/tcpdoctor-lab run c3-pinned-sndbuf        # one scenario, full form
sudo bin/tcpdoctor-lab run all --quick             # every scenario, reduced (CI runs these)
sudo bin/tcpdoctor-lab run c5-small-rcvbuf --keep  # leave the namespaces for inspection
sudo bin/tcpdoctor-lab clean                       # remove what a killed run left
```

The lab runs the product as a user does, as a separate process: the tcpdoctor that
`--tcpdoctor PATH` names, else the one next to tcpdoctor-lab (a release ships them side by side),
else the one on `$PATH`. For each diagnosis it takes two samples of the scenario's namespaces
(sockets with owners and buffer lock bits, `--interval` apart), writes them as `tcpdoctor record`
does, and runs `tcpdoctor check --from FILE --json` (with the emulated link's rate as
`--bandwidth`): the findings in the tables are tcpdoctor's own report. The traffic generators
(`tcpdoctor-lab traffic ...`), the delay line (`tcpdoctor-lab delay-line`) and the benches'
connection holders (`tcpdoctor-lab hold`) are tcpdoctor-lab's own hidden commands; tcpdoctor
links none of the lab (`go list -deps ./cmd/tcpdoctor`, checked by cmd/tcpdoctor's tests).

Each run exits non-zero when the expected finding did not appear before the fix, still appears
after it, or the fix did not help. Guarantees: traffic stays inside namespaces the lab creates
(198.18.0.0/15); every load is bounded in count and time (traffic generators also carry a
hard `--max-duration`); namespaces, links and traffic processes are removed at the end, on failure
and on Ctrl-C (which then exits 130, 128 + SIGINT); traffic processes die with the lab (PR_SET_PDEATHSIG); `tcpdoctor-lab clean` removes
`tdlab-*` namespaces whose owning lab process is gone and ends only the processes the lab recorded
in /run/tcpdoctor-lab, by PID, after checking they are still tcpdoctor-lab.

When the reader of its output goes away (`tcpdoctor-lab run all | head -1`), the commands that
build namespaces or start processes (`run`, `bench`, `serve-bench`, `trace-bench`, `link-bench`)
catch SIGPIPE, so the write fails and they go on to remove their `tdlab-*` namespaces and child
processes before they exit. `bench` and `run` write results while they run: a failed write stops
them (`bench` measures no further size, `run all` runs no further scenario), and they exit 3 with
one line on stderr, such as `tcpdoctor-lab: bench: writing results: write /dev/stdout: broken
pipe`. Exit codes: 0 reproduced (or the targets met), 1 a scenario not reproduced or a target
missed (`link-bench --check`), 2 a usage error, 3 a run that failed.

The tables below are real output of a full run of each scenario (`tcpdoctor-lab run NAME`, which
has the tcpdoctor beside it diagnose) on the project's 2-core Linux 6.18 VM, copied by
`scripts/lab-doc.sh` from the files in docs/lab/ (which hold the complete output, progress lines
included). Absolute figures vary from run to run and with the machine's load; the shape (who wins,
by roughly how much) is what the lab asserts. Where this kernel differs from the case as reported
(the figures each scenario's notes quote), the scenario says so in its notes.

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
    print(f"\n## {lines[0][3:]}\n\nCommand: `sudo bin/tcpdoctor-lab run {name}` (full output: docs/lab/{name}.txt)\n")
    print("```")
    print("\n".join(lines[1:]).strip("\n"))
    print(v.group(0) if v else "")
    print("```")

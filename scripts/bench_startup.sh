#!/usr/bin/env bash
# What a process pays before it does anything: `trainer --help` run ROUNDS times for each binary
# given, the binaries alternating so that load drifts hit them alike. Prints each binary's median
# wall time and its largest peak RSS (every rank of `trainer launch` and every test process pays
# these). Usage: scripts/bench_startup.sh [ROUNDS] TRAINER [TRAINER ...]
#   e.g. scripts/bench_startup.sh 20 /tmp/old/trainer build/trainer
set -euo pipefail
rounds=10
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
[[ $# -ge 1 ]] || { sed -n '2,6p' "$0" >&2; exit 2; }
/usr/bin/python3 - "$rounds" "$@" <<'PY'
import os, statistics, subprocess, sys, time
rounds, bins = int(sys.argv[1]), sys.argv[2:]
wall = {b: [] for b in bins}
rss_kb = {b: 0 for b in bins}
for _ in range(rounds):
    for b in bins:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.execv(b, [b, "--help"])
        _, status, usage = os.wait4(pid, 0)
        wall[b].append(time.perf_counter() - t0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{b} --help failed")
        rss_kb[b] = max(rss_kb[b], usage.ru_maxrss)
for b in bins:
    print(f"{b}: median {statistics.median(wall[b]) * 1e3:.1f} ms over {rounds} runs, "
          f"peak RSS {rss_kb[b] / 1024:.1f} MiB")
PY
